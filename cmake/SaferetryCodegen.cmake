# saferetry_set_codegen(target): code generation options of a saferetry library.
#
# The libraries are position-independent (they may be linked into a shared object). With -fPIC, GCC
# assumes that any function of default visibility may be replaced at load time by another object's
# (ELF symbol interposition), so it neither inlines nor specialises a call to one, even within a
# translation unit: the call session's calls into the state machine, the budget and the validators
# stay calls. saferetry's functions are not meant to be interposed; -fno-semantic-interposition lets
# the compiler treat them as the definitions it sees (see docs/adr/0026-no-semantic-interposition.md).
# Clang assumes this already.
function(saferetry_set_codegen target)
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-fno-semantic-interposition>)
endfunction()

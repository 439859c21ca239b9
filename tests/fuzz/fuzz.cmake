# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# Fuzz targets. Each target defines LLVMFuzzerTestOneInput and builds two ways:
#   - always: <name>_replay, a plain program that runs every file of the seed corpus
#     (tests/fuzz/corpus/<name>/) through the target; ctest runs it, so the corpus stays green;
#   - with SAFERETRY_FUZZ=ON and clang++: <name>, a libFuzzer binary (-fsanitize=fuzzer).
# .ci/fuzz.sh builds the libFuzzer binaries in their own build dir and runs each for N seconds.
# Included by tests/sim/tests.cmake (with the tests) or by tools/sim/CMakeLists.txt (fuzzing only).

set(_fuzz_dir ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(_fuzz_targets hints_fuzzer request_fuzzer status_query_fuzzer policy_fuzzer duration_fuzzer
                  journal_fuzzer)

if(SAFERETRY_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "SAFERETRY_FUZZ needs clang++ (CXX=clang++ cmake -DSAFERETRY_FUZZ=ON ...)")
endif()

function(_saferetry_fuzz_target name)
  set(_extra)
  if(name STREQUAL "duration_fuzzer")
    set(_extra ${PROJECT_SOURCE_DIR}/tools/cli/duration.cc)
  endif()
  set(_libs saferetry absl::strings absl::time absl::statusor)
  if(name STREQUAL "journal_fuzzer")
    list(APPEND _libs saferetry_journal)
  endif()

  add_executable(${name}_replay ${_fuzz_dir}/${name}.cc ${_fuzz_dir}/replay_main.cc ${_extra})
  target_include_directories(${name}_replay PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name}_replay PRIVATE ${_libs})
  saferetry_set_warnings(${name}_replay)
  if(SAFERETRY_BUILD_TESTS)
    add_test(NAME fuzz_corpus_${name} COMMAND ${name}_replay ${_fuzz_dir}/corpus/${name})
    set_tests_properties(fuzz_corpus_${name} PROPERTIES LABELS "fuzz" TIMEOUT 60)
  endif()

  if(SAFERETRY_FUZZ)
    add_executable(${name} ${_fuzz_dir}/${name}.cc ${_extra})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE ${_libs})
    saferetry_set_warnings(${name})
  endif()
endfunction()

foreach(t ${_fuzz_targets})
  _saferetry_fuzz_target(${t})
endforeach()

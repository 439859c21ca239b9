# Warning flags applied to every saferetry target through saferetry_set_warnings().
function(saferetry_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
  if(SAFERETRY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

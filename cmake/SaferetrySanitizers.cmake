# SAFERETRY_SANITIZE=address,undefined (or thread) instruments every target of this build.
if(SAFERETRY_SANITIZE)
  set(_san "-fsanitize=${SAFERETRY_SANITIZE}")
  add_compile_options(${_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(${_san})
  message(STATUS "saferetry: sanitizers ${SAFERETRY_SANITIZE}")
endif()

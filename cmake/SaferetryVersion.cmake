# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# The version, from project() in the top-level CMakeLists.txt and nowhere else (docs/api-stability.md):
# - the generated header saferetry/version.h (the tools print it with --version);
# - the shared libraries' SONAME: while the major version is 0 a minor version may break the ABI, so the
#   SONAME carries major.minor (libsaferetry.so.0.3); from 1.0 on it carries the major version alone;
# - the CMake package's version file (cmake/SaferetryInstall.cmake), by the same rule.
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in ${PROJECT_BINARY_DIR}/include/saferetry/version.h @ONLY)

if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(SAFERETRY_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(SAFERETRY_PACKAGE_COMPATIBILITY SameMinorVersion)
else()
  set(SAFERETRY_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(SAFERETRY_PACKAGE_COMPATIBILITY SameMajorVersion)
endif()

# Gives every library of the project the version and SONAME above; called once every target exists.
function(saferetry_set_library_versions)
  foreach(t saferetry saferetry_testing saferetry_curl saferetry_server saferetry_server_postgres saferetry_journal
            saferetry_journal_postgres saferetry_prometheus)
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${SAFERETRY_SOVERSION})
    endif()
  endforeach()
endfunction()

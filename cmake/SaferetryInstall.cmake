# Install rules: headers, libraries, tools, the CMake package and a pkg-config file.
include(CMakePackageConfigHelpers)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/saferetry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS saferetry saferetry_curl saferetry_testing
        EXPORT saferetryTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT saferetryTargets NAMESPACE saferetry::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/saferetryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/saferetryConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/saferetryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/saferetryConfig.cmake ${PROJECT_BINARY_DIR}/saferetryConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
file(RELATIVE_PATH SAFERETRY_PC_PREFIX_REL "/r/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/r")
configure_file(${PROJECT_SOURCE_DIR}/cmake/saferetry.pc.in ${PROJECT_BINARY_DIR}/saferetry.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/saferetry.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

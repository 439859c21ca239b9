# Install rules: headers, libraries, tools, the CMake package and a pkg-config file.
include(CMakePackageConfigHelpers)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/saferetry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/saferetry/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/saferetry)
install(TARGETS saferetry saferetry_curl saferetry_testing
        EXPORT saferetryTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT saferetryTargets NAMESPACE saferetry::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
# Components: saferetry::server (SQLite inside) and saferetry::server_postgres (libpq), each in an export
# set of its own so that a consumer of the core never needs SQLite or libpq.
install(TARGETS saferetry_server EXPORT saferetryServerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT saferetryServerTargets NAMESPACE saferetry::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
if(TARGET saferetry_server_postgres)
  install(TARGETS saferetry_server_postgres EXPORT saferetryServerPostgresTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT saferetryServerPostgresTargets NAMESPACE saferetry::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
endif()
# Component journal: saferetry::journal (the SQLite intent journal), its own export set for the same reason.
install(TARGETS saferetry_journal EXPORT saferetryJournalTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT saferetryJournalTargets NAMESPACE saferetry::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
# Component journal_postgres: saferetry::journal_postgres (libpq, through the server's PostgreSQL seam).
if(TARGET saferetry_journal_postgres)
  install(TARGETS saferetry_journal_postgres EXPORT saferetryJournalPostgresTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT saferetryJournalPostgresTargets NAMESPACE saferetry::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
endif()
# Component prometheus: saferetry::prometheus (prometheus-cpp), when it was built.
if(TARGET saferetry_prometheus)
  install(TARGETS saferetry_prometheus EXPORT saferetryPrometheusTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT saferetryPrometheusTargets NAMESPACE saferetry::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
endif()

# Component asio: saferetry::asio (header-only; the consumer brings Asio), its own export set.
if(TARGET saferetry_asio)
  install(TARGETS saferetry_asio EXPORT saferetryAsioTargets INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT saferetryAsioTargets NAMESPACE saferetry::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/saferetryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/saferetryConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
# find_package(saferetry 0.3) accepts 0.3.x only while the major version is 0, any 1.x from 1.0 on: the rule of
# docs/api-stability.md, set beside the SONAME in cmake/SaferetryVersion.cmake.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/saferetryConfigVersion.cmake
  COMPATIBILITY ${SAFERETRY_PACKAGE_COMPATIBILITY})
install(FILES ${PROJECT_BINARY_DIR}/saferetryConfig.cmake ${PROJECT_BINARY_DIR}/saferetryConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saferetry)
file(RELATIVE_PATH SAFERETRY_PC_PREFIX_REL "/r/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/r")
configure_file(${PROJECT_SOURCE_DIR}/cmake/saferetry.pc.in ${PROJECT_BINARY_DIR}/saferetry.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/saferetry.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
foreach(pc saferetry-server saferetry-server-postgres saferetry-journal saferetry-journal-postgres)
  if(pc STREQUAL "saferetry-server-postgres" AND NOT TARGET saferetry_server_postgres)
    continue()
  endif()
  if(pc STREQUAL "saferetry-journal-postgres" AND NOT TARGET saferetry_journal_postgres)
    continue()
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

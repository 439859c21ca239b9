# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
# cmake -DBUILD_DIR=... -DPREFIX=... -DBINDIR=bin -P install_check.cmake
# Installs the tool's component into a scratch prefix and runs the installed copy.
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} --component cli
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${out}${err}")
endif()
set(tool ${PREFIX}/${BINDIR}/saferetry)
if(NOT EXISTS ${tool})
  message(FATAL_ERROR "not installed: ${tool}")
endif()
execute_process(COMMAND ${tool} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Usage: saferetry \\[OPTIONS\\] URL")
  message(FATAL_ERROR "installed tool: --help gave ${rc}: ${out}")
endif()
execute_process(COMMAND ${tool} ftp://127.0.0.1/x RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 64 OR NOT err MATCHES "unsupported scheme")
  message(FATAL_ERROR "installed tool: a bad URL gave ${rc}: ${err}")
endif()
file(REMOVE_RECURSE ${PREFIX})
message(STATUS "installed and ran ${tool}")

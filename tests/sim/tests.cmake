# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# The simulator's tests, the property tests and the fuzz corpus tests. Included from
# tools/sim/CMakeLists.txt; every path here is absolute.
find_package(GTest CONFIG REQUIRED)
include(GoogleTest)

add_executable(simulator_test ${PROJECT_SOURCE_DIR}/tests/sim/simulator_test.cc)
target_link_libraries(simulator_test PRIVATE saferetry_sim_lib GTest::gmock_main)
saferetry_set_warnings(simulator_test)
gtest_discover_tests(simulator_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS sim)

# SAFERETRY_PROPERTY_RUNS sets the number of fault scripts (default 100000, under a second in a
# Release build); SAFERETRY_PROPERTY_SEED=<n> replays one seed with its trace.
add_executable(property_test ${PROJECT_SOURCE_DIR}/tests/sim/property_test.cc)
target_link_libraries(property_test PRIVATE saferetry saferetry_testing GTest::gmock_main
                      absl::strings absl::str_format absl::time)
saferetry_set_warnings(property_test)
gtest_discover_tests(property_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS property TIMEOUT 300)

# SAFERETRY_EXHAUSTIVE_DEPTH sets the depth of the exhaustive search over event sequences
# (default 6).
add_executable(exhaustive_test ${PROJECT_SOURCE_DIR}/tests/sim/exhaustive_test.cc)
target_link_libraries(exhaustive_test PRIVATE saferetry saferetry_testing GTest::gmock_main
                      absl::strings)
saferetry_set_warnings(exhaustive_test)
gtest_discover_tests(exhaustive_test DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS "exhaustive;property;sim" TIMEOUT 300)

# The tool: a bad flag is named (exit code 64 is checked by tests/sim/cli_check.cmake), --version prints
# project()'s version, and --json carries the contention fields.
add_test(NAME saferetry_sim_bad_flag
         COMMAND ${CMAKE_COMMAND} -DSIM=$<TARGET_FILE:saferetry_sim> -DVERSION=${PROJECT_VERSION}
                 -P ${PROJECT_SOURCE_DIR}/tests/sim/cli_check.cmake)
set_tests_properties(saferetry_sim_bad_flag PROPERTIES LABELS sim)
add_test(NAME saferetry_sim_json_contention
         COMMAND saferetry_sim --preset contention --clients 10 --trials 3 --jitter full --json)
set_tests_properties(saferetry_sim_json_contention PROPERTIES
  PASS_REGULAR_EXPRESSION "\"writes\":[0-9.]+.*\"completion_ms\":" LABELS sim)
add_test(NAME saferetry_sim_json_brown_out
         COMMAND saferetry_sim --preset brown-out --failure-rate 0.1 --seconds 2 --json)
set_tests_properties(saferetry_sim_json_brown_out PROPERTIES
  PASS_REGULAR_EXPRESSION "\"load_amplification\":.*\"success_rate\":.*\"unknown\":.*\"duplicates\":" LABELS sim)

include(${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz.cmake)

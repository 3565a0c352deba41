# s3://'s tests, included by tests/CMakeLists.txt. s3_parse_test: the
# parsers and SigV4, alone. s3_hostile_test: a hostile S3 server (a script
# the test starts itself). s3_test (s3_test.cc, s3_failure_test.cc, their
# helpers in s3_test.h): against a real S3 server, Ceph's RADOS Gateway,
# that the fixture "s3" (tests/CMakeLists.txt) starts once per run.
ckpt_test(s3_parse_test ${backend_dir}/s3_parse_test.cc)
# The hostile S3 server of these tests is a script the test starts itself.
ckpt_test(s3_hostile_test ${backend_dir}/s3_hostile_test.cc)
target_compile_definitions(s3_hostile_test PRIVATE CKPT_BIN="$<TARGET_FILE:ckpt_cli>"
  HOSTILE_S3_SCRIPT="${PROJECT_SOURCE_DIR}/tests/support/hostile_s3.py")
add_dependencies(s3_hostile_test ckpt_cli)
add_executable(s3_test ${backend_dir}/s3_test.cc ${backend_dir}/s3_failure_test.cc)
target_link_libraries(s3_test PRIVATE ckpt_testutil GTest::gtest_main)
target_compile_options(s3_test PRIVATE ${CKPT_WARNINGS})
target_compile_definitions(s3_test PRIVATE CKPT_S3_ENV_FILE="${CKPT_S3_DIR}/env" CKPT_BIN="$<TARGET_FILE:ckpt_cli>"
  CRASH_SAVER_PATH="$<TARGET_FILE:crash_saver>" S3_SERVER_SCRIPT="${PROJECT_SOURCE_DIR}/scripts/s3-server.sh")
add_dependencies(s3_test ckpt_cli crash_saver)
ckpt_test_pch(s3_test)
gtest_discover_tests(s3_test DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES TEST_FILTER "-S3Restart.*"
  PROPERTIES FIXTURES_REQUIRED s3 LABELS s3)
# Kills and restarts the gateway: alone, so no other test sees it down.
add_test(NAME S3Restart.AGatewayKilledMidSaveIsRetriedThroughOrFailsCleanly
  COMMAND s3_test --gtest_filter=S3Restart.*)
set_tests_properties(S3Restart.AGatewayKilledMidSaveIsRetriedThroughOrFailsCleanly PROPERTIES
  FIXTURES_REQUIRED s3 LABELS s3 RUN_SERIAL TRUE)


/* check_main.c: runs every suite; exits non-zero when any test fails. */
#include <stdlib.h>

#include "test_util.h"

int main(void) {
  SRunner *sr = srunner_create(frame_suite());
  int failed;

  ei_init();
  srunner_add_suite(sr, etf_suite());
  srunner_add_suite(sr, intern_suite());
  srunner_add_suite(sr, hmap_suite());
  srunner_add_suite(sr, decode_suite());
  srunner_add_suite(sr, replay_suite());
  srunner_add_suite(sr, control_suite());
  srunner_add_suite(sr, tiers_suite());
  srunner_add_suite(sr, flame_suite());
  srunner_add_suite(sr, ring_suite());
  srunner_add_suite(sr, vm_clock_suite());
  srunner_add_suite(sr, full_trace_suite());
  srunner_add_suite(sr, overload_suite());
  srunner_add_suite(sr, stack_suite());
  srunner_add_suite(sr, options_suite());
  srunner_add_suite(sr, consumer_suite());
  srunner_add_suite(sr, budget_suite());
  srunner_add_suite(sr, out_dir_suite());
  srunner_add_suite(sr, main_suite());
  srunner_add_suite(sr, record_suite());
  srunner_add_suite(sr, sample_suite());
  srunner_add_suite(sr, sample_sink_suite());
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

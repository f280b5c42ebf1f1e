"""What a dead worker's log says killed it (suites/harness/process.py ``cause_in``,
``last_words``): the FATAL line of absl or glog, a C++ exception's ``what()``, CPython's
fatal error, else the last line that is no stack frame or noise."""

from __future__ import annotations

from suites.harness.process import cause_in, ended, last_words
from tests.fake_framework import ABORT_LINES


def test_a_failed_check_is_named_by_its_fatal_line_not_the_stack_trace_after_it():
    cause = cause_in(ABORT_LINES)
    assert cause.startswith("conv_2d_gpu.h:1028: Check failed: (::tsl::TfCheckOk")
    # Long: its middle goes, its status (at the end) stays.
    assert cause.endswith("is OK (INTERNAL: an illegal memory access was encountered)")
    assert " ... " in cause and len(cause) <= 300


def test_the_fatal_line_outranks_the_generic_abort_that_faulthandler_writes_after_it():
    stderr = ABORT_LINES + ("Fatal Python error: Aborted\n\n"
                            "Current thread 0x00007f (most recent call first):\n")
    assert cause_in(stderr).startswith("conv_2d_gpu.h:1028: Check failed: ")


def test_an_uncaught_cpp_exception_is_named_by_what():
    stderr = ("terminate called after throwing an instance of 'c10::Error'\n"
              "  what():  CUDA error: an illegal memory access was encountered\n"
              "Exception raised from c10_cuda_check_implementation at c10/cuda/CUDAException.cpp:44\n"
              "frame #0: c10::Error::Error() + 0x1 (0x7f in libc10.so)\n")
    assert cause_in(stderr) == "CUDA error: an illegal memory access was encountered"


def test_a_fatal_python_error_and_the_fallback():
    stderr = ("Fatal Python error: Segmentation fault\n\n"
              "Current thread 0x00007f (most recent call first):\n  File \"x.py\", line 3 in f\n")
    assert cause_in(stderr) == "Fatal Python error: Segmentation fault"
    # No known form: the last line that is neither a frame nor absl's INFO.
    assert cause_in("killed: out of host memory\n    @     0x7f  (unknown)\n"
                    "I0000 00:00:1.0    1 port.cc:153] oneDNN custom operations are on.\n") \
        == "killed: out of host memory"
    assert cause_in("") == "" and cause_in("\n  \n") == ""


def test_last_words_read_only_what_the_dead_worker_wrote(tmp_path):
    log = tmp_path / "fake_gpu.log"
    log.write_text(ABORT_LINES)
    since = log.stat().st_size
    assert last_words(log, since) == ""
    with log.open("a") as more:
        more.write("a later worker's last line\n")
    assert last_words(log, since) == "a later worker's last line"
    assert last_words(tmp_path / "missing.log") == ""


def test_how_a_worker_ended():
    assert ended(-6) == "was killed by SIGABRT" and ended(-9) == "was killed by SIGKILL"
    assert ended(3) == "exited with code 3" and ended(-200) == "was killed by signal 200"

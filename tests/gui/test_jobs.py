"""Background jobs: a reporting job's reports, made on the job's thread and on threads it starts, are heard on
the GUI thread, so listeners there can come and go (a waitSignal each) while the threads report."""

import threading
import time

from gui.jobs import BackgroundJobs

WAIT_MS = 10_000


def reporting_job(stop: threading.Event, n_threads: int = 3):
    """A job that reports from `n_threads` threads of its own until `stop` is set, as a download's file threads
    do; returns how many reports were made."""
    def run(report):
        counts = [0] * n_threads

        def keep_reporting(n: int) -> None:
            while not stop.is_set():
                report((n, counts[n]))
                counts[n] += 1
                time.sleep(0.0005)

        threads = [threading.Thread(target=keep_reporting, args=(n,)) for n in range(n_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(counts)
    return run


def test_reports_from_a_jobs_threads_reach_listeners_that_come_and_go_on_the_gui_thread(qtbot):
    jobs = BackgroundJobs("reports")
    stop, heard = threading.Event(), []
    jobs.progressed.connect(lambda job_id, value: heard.append((job_id, value, threading.current_thread())))
    try:
        job_id = jobs.submit(reporting_job(stop), reporting=True)
        for _ in range(600):  # a listener each time, connected and disconnected while the threads report
            with qtbot.waitSignal(jobs.progressed, timeout=WAIT_MS) as blocker:
                pass
            assert blocker.args[0] == job_id
        with qtbot.waitSignal(jobs.finished, timeout=WAIT_MS) as blocker:
            stop.set()
        assert blocker.args[0] == job_id and blocker.args[1] >= len({value for _, value, _ in heard}) > 0
        assert {thread for _, _, thread in heard} == {threading.main_thread()}
        assert all(n in range(3) for _, (n, _), _ in heard)
    finally:
        stop.set()
        jobs.shutdown()
    assert not jobs.thread.isRunning()


def test_a_plain_job_gets_no_report_argument_and_its_failure_comes_back(qtbot):
    jobs = BackgroundJobs("plain")
    try:
        with qtbot.waitSignal(jobs.finished, timeout=WAIT_MS) as blocker:
            plain = jobs.submit(lambda: "result")
        assert blocker.args == [plain, "result"]
        with qtbot.waitSignal(jobs.failed, timeout=WAIT_MS) as blocker:
            broken = jobs.submit(lambda: 1 / 0)
        assert blocker.args[0] == broken and isinstance(blocker.args[1], ZeroDivisionError)
    finally:
        jobs.shutdown()
    assert not jobs.thread.isRunning()

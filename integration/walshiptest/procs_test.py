"""procs on their own: process groups, stop and kill, logs, the registry."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

from integration.walshiptest import binaries
from integration.walshiptest import procs
from integration.walshiptest import waits

# A program that traps SIGTERM and exits 7 with a word, or ignores it.
TRAP_TERM = "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
IGNORE_TERM = "trap '' TERM; echo ready; while :; do sleep 0.05; done"


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class ProcTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.launcher = procs.Launcher(logdir=self.dir)
        self.addCleanup(self.launcher.kill_all)

    def sh(self, name, script, **kw):
        return self.launcher.start(name, ["/bin/sh", "-c", script], **kw)

    def test_leads_its_own_group_and_logs_a_banner_then_its_output(self):
        p = self.sh("group", "echo out; echo err >&2; sleep 30")
        p.wait_log(r"^err$", 10)
        self.assertEqual(os.getpgid(p.pid), p.pid)
        lines = p.log_lines()
        self.assertRegex(lines[1], r"^==== group start \d\d:\d\d:\d\d: /bin/sh -c echo out")
        self.assertEqual(lines[2:], ["out", "err"])
        self.assertEqual(os.path.basename(p.log_path), "001-group.log")
        self.assertEqual(os.path.basename(self.sh("next", "true").log_path), "002-next.log")

    def test_stop_returns_the_exit_status_of_the_signal_handler(self):
        p = self.sh("trap", TRAP_TERM)
        p.wait_log("^ready$", 10)
        self.assertEqual(p.stop(), 7)
        self.assertIn("got TERM", p.log_text())
        self.assertFalse(p.alive())

    def test_stop_of_a_process_that_ignores_the_signal_kills_it_and_says_so(self):
        p = self.sh("stubborn", IGNORE_TERM)
        p.wait_log("^ready$", 10)
        self.assertEqual(p.stop(timeout=0.2), "hung on SIGTERM")
        self.assertEqual(p.returncode(), -signal.SIGKILL)

    def test_kill9_reaches_the_children_in_the_group(self):
        p = self.sh("parent", "sleep 300 & echo child=$!; wait")
        child = int(p.wait_log(r"^child=\d+$", 10).split("=")[1])
        self.assertTrue(pid_alive(child))
        self.assertEqual(p.kill9(), -signal.SIGKILL)
        waits.wait_until(lambda: not pid_alive(child), 10, "the child to die with the group")

    def test_kill9_returns_once_no_member_of_the_group_runs(self):
        # A child with a large heap takes a while to exit after SIGKILL, as a
        # PostgreSQL backend holding shared memory does: a server started
        # again at once must not find it still attached.
        big = "import time; b = b'x' * (1 << 28); print('ready', flush=True); time.sleep(300)"
        p = self.sh("heap", "%s -c \"%s\" & echo child=$!; wait" % (sys.executable, big))
        child = int(p.wait_log(r"^child=\d+$", 10).split("=")[1])
        p.wait_log("^ready$", 30)
        self.assertEqual(p.kill9(), -signal.SIGKILL)
        self.assertFalse(pid_alive(child))
        self.assertEqual(procs.group_members(p.pid), [])

    def test_a_stopped_process_can_still_be_stopped(self):
        p = self.sh("paused", TRAP_TERM)
        p.wait_log("^ready$", 10)
        p.pause()
        self.assertEqual(p.stop(), 7)

    def test_wait_rusage_reaps_and_reports(self):
        p = self.sh("short", "exit 3")
        rc, ru = p.wait_rusage(10)
        self.assertEqual(rc, 3)
        self.assertTrue(p.reaped)
        self.assertGreaterEqual(ru.ru_utime + ru.ru_stime, 0.0)
        self.assertEqual(p.returncode(), 3)

    def test_grep_since_an_offset_and_a_bounded_wait_for_a_line(self):
        p = self.sh("lines", "echo one; sleep 30")
        p.wait_log("^one$", 10)
        since = p.log_size()
        self.assertEqual(p.grep("one", since), [])
        self.assertEqual(p.grep("^one$"), ["one"])
        with self.assertRaises(waits.WaitTimeout) as cm:
            p.wait_log("two", 0.1)
        self.assertIn("lines to log /two/", str(cm.exception))

    def test_environment_directory_and_stdin(self):
        p = self.sh("env", "echo $WALSHIPTEST_X; pwd; cat", extra_env={"WALSHIPTEST_X": "x1"},
                    cwd=self.dir, stdin=open(os.devnull))
        self.assertEqual(p.wait(10), 0)
        self.assertEqual(p.log_lines()[2:], ["x1", self.dir])

    def test_kill_all_ends_every_running_process(self):
        a = self.sh("a", "sleep 300")
        b = self.sh("b", "sleep 300")
        done = self.sh("done", "true")
        done.wait(10)
        self.launcher.kill_all()
        self.assertEqual((a.returncode(), b.returncode(), done.returncode()),
                         (-signal.SIGKILL, -signal.SIGKILL, 0))

    @unittest.skipUnless(procs.find_setpriv(), "no setpriv with --pdeathsig here")
    def test_children_die_with_the_process_that_started_them(self):
        script = ("import sys\n"
                  "from integration.walshiptest import procs\n"
                  "p = procs.Launcher(logdir=sys.argv[1]).start('orphan', ['sleep', '300'])\n"
                  "print('child=%d' % p.pid, flush=True)\n"
                  "sys.stdin.read()\n")
        parent = self.launcher.start("parent", [sys.executable, "-c", script, self.dir],
                                     stdin=subprocess.PIPE, cwd=binaries.REPO)
        child = int(parent.wait_log(r"^child=\d+$", 30).split("=")[1])
        waits.wait_until(lambda: pid_alive(child) and
                         open("/proc/%d/comm" % child).read().strip() == "sleep", 10,
                         "setpriv to exec sleep")
        parent.signal_process(signal.SIGKILL)  # the group's other members live on
        parent.wait(10)
        waits.wait_until(lambda: not pid_alive(child), 10, "the child to die with its parent")

    def test_runs_as_us_when_the_user_is_us(self):
        import pwd
        me = procs.Launcher(user=pwd.getpwuid(os.geteuid()))
        self.assertEqual(me.user_kwargs(True), {})


class PidAliveTest(unittest.TestCase):

    def test_running_zombie_and_gone(self):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            self.assertTrue(procs.pid_alive(p.pid))
            os.kill(p.pid, signal.SIGKILL)
            # Dead but not reaped: a zombie is not alive.
            waits.wait_until(lambda: not procs.pid_alive(p.pid), 10, "the zombie")
            self.assertTrue(os.path.exists("/proc/%d" % p.pid))
        finally:
            p.kill()
            p.wait()
        self.assertFalse(procs.pid_alive(p.pid))


class LogTest(unittest.TestCase):

    def test_one_line_with_wall_time_and_elapsed_seconds(self):
        out = tempfile.TemporaryFile("w+")
        old, sys.stdout = sys.stdout, out
        try:
            procs.log("hello %s %d", "world", 3)
        finally:
            sys.stdout = old
        out.seek(0)
        self.assertRegex(out.read(), re.compile(
            r"^\[\d\d:\d\d:\d\d\.\d{3} \+ *\d+\.\ds\] hello world 3\n$"))

    def test_read_text_of_a_missing_file_is_empty(self):
        self.assertEqual(procs.read_text("/nonexistent/walshiptest.log"), "")


if __name__ == "__main__":
    unittest.main()

"""The PostgreSQL world: a real PostgreSQL 15 primary under numbered commits.

The primary (1 MiB segments) archives every complete segment into golden/
(`archive_command` cp, then mv: the source's bytes survive recycling, and a
copy has a segment's name only once whole); the segment in
progress is read from pg_wal. drill-loader commits one numbered row per
transaction and records each acknowledged one. Half of the time
synchronous_standby_names names walship (the flush feed), switched every
`sync_every` faults of this world. A base backup (-X none) taken before the
first fault is, at the end, replayed through `walship-replica restore` from a
replica's copy and promoted: every acknowledged commit must be on it.

The sampler also reads pg_stat_replication's flush_lsn for walship: the
furthest position the primary itself recorded as flushed by a replica.
"""

import os
import shutil
import signal
import time

from integration import harness as h
from integration.chaos import checks
from integration.chaos import world
from integration.walshiptest.lsn import fmt_lsn, parse_lsn, parse_segment, segment_name
from integration.walshiptest.pg import PgCluster
from integration.walshiptest.ports import free_port
from integration.walshiptest.procs import Proc
from integration.walshiptest.waits import StepError, wait_until

TABLE = "chaos_acks"
FEED = "walship"


def archive_command(archive):
    """PostgreSQL's archive_command into `archive`: the copy gets the
    segment's name only once whole (the checks read the archive meanwhile)."""
    return "cp %%p %s/%%f.copying && mv %s/%%f.copying %s/%%f" % (archive, archive, archive)


class PgWorld(world.World):
    kind = "postgres"

    def __init__(self, root, rng, params, env):
        world.World.__init__(self, "postgres", root, rng, params)
        self.env = env
        self.segsize = 1 << 20
        area = env.mkdir("chaos-pg")
        self.sock = env.mkdir("chaos-pg", "sock")
        self.archive = env.mkdir("chaos-pg", "archive")
        self.pg = PgCluster(env, "primary", os.path.join(area, "primary"), self.sock,
                            free_port(), self.logs)
        self.base = PgCluster(env, "standby", os.path.join(area, "standby"), self.sock,
                              free_port(), self.logs)
        self.loads = []  # (start seq, acks path, Proc)
        self.next_seq = 1
        self.sync = False
        self.flush_max = 0  # pg_stat_replication.flush_lsn, highest seen
        self.current = None  # (timeline, segment number) of the flush position
        self._session = None

    # -- set-up -----------------------------------------------------------------
    def agent_args(self):
        return ["--format=postgres", "--pg-data=" + self.pg.datadir,
                "--pg-conninfo=" + self.pg.conninfo(), "--pg-slot=walship",
                "--state-dir=" + self.mkdir("agent-state")]

    def start(self):
        self.pg.initdb(1)
        self.pg.configure({
            "port": self.pg.port, "unix_socket_directories": self.sock,
            "listen_addresses": "", "wal_level": "replica", "max_wal_senders": 6,
            "max_replication_slots": 6, "wal_keep_size": 0, "fsync": "on",
            "synchronous_commit": "on", "checkpoint_timeout": "30s",
            "max_wal_size": "32MB", "min_wal_size": "4MB", "shared_buffers": "32MB",
            "archive_mode": "on", "archive_command": archive_command(self.archive),
            "restart_after_crash": "off", "hot_standby": "on",
            "log_line_prefix": "%m [%p] "})
        self.pg.start()
        self.pg.psql("CREATE TABLE %s (seq bigint PRIMARY KEY)" % TABLE)
        self.start_daemons(self.pg.pg_wal)
        self.pg.basebackup(self.base)
        self.start_load()

    def start_load(self):
        if self.loads and self.loads[-1][2].alive():
            return
        path = os.path.join(self.dir, "acks-%d.txt" % len(self.loads))
        proc = Proc(self.env, "loader", [
            self.env.binaries["drill-loader"], "--conninfo=%s" % self.pg.conninfo(),
            "--acks=%s" % path, "--table=%s" % TABLE, "--seconds=100000",
            "--start-seq=%d" % self.next_seq, "--rate=%d" % self.p.pg_rate],
            os.path.join(self.logs, "loader.log"), as_user=False)
        self.loads.append((self.next_seq, path, proc))
        self.next_seq += 10000000  # each loader its own range of numbers

    def stop(self):
        for _, _, proc in self.loads:
            if proc.alive():
                proc.stop(timeout=10)
        if self._session:
            self._session.close()
        world.World.stop(self)
        for c in (self.pg, self.base):
            c.teardown()

    # -- sampling -----------------------------------------------------------------
    def sample_source(self):
        try:
            if self._session is None:
                self._session = self.pg.session()
            row = self._session.query(
                "SELECT coalesce((SELECT max(flush_lsn) FROM pg_stat_replication WHERE "
                "application_name = '%s'), '0/0') || ' ' || "
                "CASE WHEN pg_is_in_recovery() THEN '' ELSE "
                "pg_walfile_name(pg_current_wal_flush_lsn()) END" % FEED, timeout=1.0)
        except Exception:  # noqa: BLE001 - the primary may be down: next sample
            if self._session:
                self._session.close()
            self._session = None
            return
        parts = (row or "").split()
        if parts:
            with self.lock:
                self.flush_max = max(self.flush_max, parse_lsn(parts[0]) or 0)
                if len(parts) > 1:
                    self.current = self.parse(parts[1])

    # -- golden bytes -------------------------------------------------------------
    def parse(self, name):
        return parse_segment(name, self.segsize)

    def _archived(self, name):
        """The archive's copy of segment `name` if it is whole, else None."""
        p = os.path.join(self.archive, name)
        try:
            return p if os.path.getsize(p) == self.segsize else None
        except OSError:
            return None

    def golden_path(self, name):
        p = self._archived(name)
        if p is not None:
            return p
        cur, parsed = self.current, self.parse(name)
        if cur and parsed and parsed[0] == cur[0] and parsed[1] <= cur[1]:
            p = os.path.join(self.pg.pg_wal, name)
            return p if os.path.isfile(p) else None
        return None

    def golden_complete(self, name):
        cur, parsed = self.current, self.parse(name)
        return self._archived(name) is not None or bool(
            cur and parsed and parsed[0] == cur[0] and parsed[1] < cur[1])

    def pos_of_lsn(self, lsn, rep):
        """The Pos of LSN on the timeline `rep` holds that segment on."""
        segno, off = divmod(lsn, self.segsize)
        held = checks._held(self, rep.dest).get(segno)
        tli = self.parse(held[0])[0] if held else (self.current or (1, 0))[0]
        return h.Pos(segment_name(tli, segno, self.segsize), off)

    def primary_acked_problems(self):
        """The primary's flush_lsn for walship must be on some replica."""
        with self.lock:
            lsn = self.flush_max
        if not lsn:
            return []
        found = []
        for r in self.replicas:
            t = self.tracker(r)
            if t.first is None:
                continue
            probs = checks.acked(self, r, t, self.pos_of_lsn(lsn, r), "flushed per the primary")
            if not probs:
                return []
            found.extend(probs)
        return ["no replica holds the primary's flush_lsn %s: %s" % (
            fmt_lsn(lsn), "; ".join(found[:3]))] if found else []

    # -- faults -----------------------------------------------------------------------
    def set_sync(self, on):
        """synchronous_standby_names naming walship (on) or empty (off)."""
        self.sync = on
        self.pg.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % (FEED if on else ""))
        self.pg.psql("SELECT pg_reload_conf()")

    def restart_primary(self, recovery=False, promote=False, hold=0.0):
        if self.pg.running():
            self.pg.stop(timeout=60)
        if recovery:
            self.pg.touch("standby.signal")
        self.pg.start(wait_for=("ready", "standby"), timeout=120)
        time.sleep(hold)
        if promote:
            self.pg.promote()
        elif recovery:
            self.pg.stop(timeout=60)
            os.unlink(os.path.join(self.pg.datadir, "standby.signal"))
            self.pg.start(timeout=120)
        wait_until(lambda: self.pg.psql("SELECT NOT pg_is_in_recovery()", check=False) == "t",
                   60, "the primary to accept writes", interval=0.1)
        self.set_sync(self.sync)
        self.start_load()

    def timeline(self):
        name = self.pg.psql("SELECT pg_walfile_name(pg_current_wal_lsn())", check=False)
        return int(name[:8], 16) if name else 0

    def postmaster_fault(self, f):
        if f.kind == "kill9-postmaster":
            self.pg.kill9()
            time.sleep(f.params["pause"])
            self.restart_primary()
            return "kill -9 of the PostgreSQL server, restarted after %.1fs" % f.params["pause"]
        os.kill(self.pg.proc.pid, signal.SIGSTOP)
        time.sleep(f.params["stop_s"])
        os.kill(self.pg.proc.pid, signal.SIGCONT)
        return "SIGSTOP of the postmaster for %.1fs" % f.params["stop_s"]

    def source_fault(self, f):
        if f.kind == "pg-promote":
            before = self.timeline()
            self.restart_primary(recovery=True, promote=True, hold=f.params["hold"])
            return "restarted in recovery, promoted: timeline %d -> %d" % (
                before, self.timeline())
        self.restart_primary(recovery=True, hold=f.params["hold"])
        return "primary in recovery for %.1fs, then a primary again" % f.params["hold"]

    def ensure_up(self):
        if not self.pg.running():
            self.restart_primary()
        self.start_load()
        world.World.ensure_up(self)

    # -- the end: a promoted standby from a replica's copy ---------------------------------
    def acked_seqs(self):
        seqs = set()
        for _, path, _ in self.loads:
            try:
                with open(path) as fh:
                    seqs.update(int(l.split()[1]) for l in fh if l.startswith("A "))
            except OSError:
                pass
        return seqs

    def final_standby_check(self, rep):
        """Stops the load, replays the base backup through `walship-replica
        restore` from rep's copy, promotes; returns (problems, detail)."""
        for _, _, proc in self.loads:
            if proc.alive():
                proc.stop(timeout=10)
        acked = self.acked_seqs()
        rep.stop(timeout=10)
        copy = self.env.mkdir("chaos-pg", "final-copy")
        shutil.rmtree(copy)
        shutil.copytree(rep.dest, copy)
        for dirpath, _, files in os.walk(copy):
            for n in files + [""]:
                self.env.chown(os.path.join(dirpath, n))
        self.base.configure({
            "port": self.base.port, "unix_socket_directories": self.sock,
            "restore_command": "%s restore --dest=%s %%f %%p" % (
                self.env.binaries["walship-replica"], copy),
            "recovery_target_timeline": "latest", "primary_conninfo": "",
            "archive_mode": "off", "hot_standby": "on"})
        self.base.touch("standby.signal")
        try:
            self.base.start(wait_for=("ready", "standby"), timeout=180)
        except StepError as e:
            rep.start()
            return ["a standby from the base backup did not become consistent replaying %s's "
                    "copy: %s" % (rep.name, e)], "standby not consistent"
        last, since = None, time.monotonic()
        while time.monotonic() - since < 5.0:  # replay until it stops moving
            cur = self.base.lsn("pg_last_wal_replay_lsn()")
            if cur != last:
                last, since = cur, time.monotonic()
            time.sleep(0.2)
        self.base.promote()
        rows = self.base.psql("SELECT seq FROM %s" % TABLE, timeout=120) or ""
        present = set(int(x) for x in rows.split())
        lost = sorted(acked - present)
        detail = ("%d acknowledged commits, %d on the promoted standby (replayed to %s from "
                  "%s); the primary's flush_lsn for walship reached %s" % (
                      len(acked), len(acked & present), fmt_lsn(last), rep.name,
                      fmt_lsn(self.flush_max)))
        rep.start()
        return (["%d acknowledged commits missing on the promoted standby, e.g. %s" % (
            len(lost), lost[:5])] if lost else []), detail

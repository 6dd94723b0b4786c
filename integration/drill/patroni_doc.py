"""The Patroni configuration of docs/postgresql.md, as the drills run it.

The guide's section "Patroni: the whole configuration" holds four blocks
between `<!-- patroni:NAME:begin -->` and `<!-- patroni:NAME:end -->`: the
dynamic configuration (`dcs`, applied with patronictl edit-config), the
gate (`pre-promote`), the agent's command line (`agent`) and the replica's
(`replica`). The drills take them from the file word for word and replace
only the example's names (paths, hosts, ports, the TLS flags): a change of
the guide is a change of what the drills run, and a name the drills do not
know how to replace fails them.
"""

import re
import shlex

from integration.walshiptest import binaries

GUIDE = "docs/postgresql.md"
PGDATA = "/var/lib/postgresql/15/main"
CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


class GuideError(AssertionError):
    """The guide's blocks are not what the drills can run."""


def read_guide():
    with open(binaries.runfile(GUIDE)) as f:
        return f.read()


def block(text, name):
    """The fenced block between the markers of `name` (without the fences)."""
    m = re.search(r"<!-- patroni:%s:begin -->\n```[a-z]*\n(.*?)```\n<!-- patroni:%s:end -->"
                  % (re.escape(name), re.escape(name)), text, re.S)
    if not m:
        raise GuideError("%s has no patroni:%s block" % (GUIDE, name))
    return m.group(1)


def command(text):
    """A shell command of the guide (lines continued by backslashes) -> argv."""
    return shlex.split(text.replace("\\\n", " "))


def substitute(argv, names):
    """Replaces the example's names in each argument; every argument that
    still names an example path or host is an error (the guide changed)."""
    out = []
    for a in argv:
        for old, new in names:
            a = a.replace(old, new)
        if re.search(r"/etc/walship|/var/lib/|/service/main/|0\.0\.0\.0|\bdb[0-9][:=]|"
                     r"\betcd[0-9]:|replica-[0-9]:", a):
            raise GuideError("no test value for %r in %s" % (a, GUIDE))
        out.append(a)
    return out


def _tls_free(argv):
    """Drops the example's --tls-* flags and adds --insecure once."""
    kept = [a for a in argv if not a.startswith("--tls-")]
    return kept + ["--insecure"]


class PatroniGuide(object):
    """The guide's blocks, ready to run with a world's names."""

    def __init__(self, text=None):
        text = text if text is not None else read_guide()
        self.dcs = block(text, "dcs")
        self.pre_promote = self._folded(block(text, "pre-promote"), "pre_promote")
        self.node_parameters = self._mapping(block(text, "pre-promote"), "parameters")
        self.node_tags = self._mapping(block(text, "pre-promote"), "tags")
        self.agent = command(block(text, "agent"))
        self.replica = command(block(text, "replica"))
        self.status = command(block(text, "status"))
        for argv, program in [(self.agent, "walship-agent"), (self.replica, "walship-replica"),
                              (self.status, "walship-status")]:
            if argv[0] != program:
                raise GuideError("the %s block does not run %s" % (GUIDE, program))

    @staticmethod
    def _mapping(yaml_text, key):
        """The `name: value` lines indented under `key:`, as a dict."""
        lines = yaml_text.splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "%s:" % key:
                indent = len(line) - len(line.lstrip())
                out = {}
                for cont in lines[i + 1:]:
                    if len(cont) - len(cont.lstrip()) <= indent:
                        break
                    name, _, value = cont.strip().partition(":")
                    out[name.strip()] = value.strip().strip('"')
                return out
        raise GuideError("no %s in the pre-promote block of %s" % (key, GUIDE))

    @staticmethod
    def _folded(yaml_text, key):
        """The value of a `key: >-` folded scalar: its lines joined by spaces."""
        lines = yaml_text.splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "%s: >-" % key:
                indent = len(line) - len(line.lstrip())
                body = []
                for cont in lines[i + 1:]:
                    if len(cont) - len(cont.lstrip()) <= indent:
                        break
                    body.append(cont.strip())
                return " ".join(body)
        raise GuideError("no %s in the pre-promote block of %s" % (key, GUIDE))

    def gate_argv(self, program, serve_addrs, pgdata, conninfo):
        argv = shlex.split(self.pre_promote)
        if argv[:2] != ["walship-replica", "gate"]:
            raise GuideError("pre_promote of %s does not run walship-replica gate" % GUIDE)
        argv = _tls_free(argv)
        return [program] + substitute(argv[1:], [
            ("replica-1:7402,replica-2:7402", ",".join(serve_addrs)),
            (PGDATA, pgdata), (CONNINFO, conninfo)])

    def agent_argv(self, program, pgdata, conninfo, state_dir, listen, member, etcd, scope):
        """`member`: the node's name in Patroni; `etcd`: HOST:PORT of the
        cluster's etcd; `scope`: Patroni's scope."""
        argv = _tls_free(self.agent)
        if "--member=db1" not in argv:
            raise GuideError("the agent block of %s has no --member=db1" % GUIDE)
        return [program] + substitute(argv[1:], [
            (PGDATA, pgdata), (CONNINFO, conninfo), ("/var/lib/walship/agent", state_dir),
            ("etcd1:2379,etcd2:2379,etcd3:2379", etcd),
            ("/service/main/leader", "/service/%s/leader" % scope),
            ("--member=db1", "--member=%s" % member),
            ("0.0.0.0:7400", listen), ("0.0.0.0:7401", "127.0.0.1:0")])

    def tags(self, agent):
        """The node block's tags, naming `agent` (HOST:PORT of the agent
        beside the node) where the guide names db1's."""
        out = {}
        for k, v in self.node_tags.items():
            if v == "db1:7400":
                v = agent
            elif re.search(r"\bdb[0-9]:", v):
                raise GuideError("no test value for tag %s: %s in %s" % (k, v, GUIDE))
            out[k] = v
        return out

    def status_argv(self, etcd, scope):
        """The status block's flags (without its program), for `etcd`
        (HOST:PORT) and Patroni's `scope`."""
        return substitute(_tls_free(self.status)[1:], [
            ("etcd1:2379,etcd2:2379,etcd3:2379", etcd),
            ("/service/main/leader", "/service/%s/leader" % scope)])

    def replica_argv(self, program, etcd, scope, dest, name, serve_listen):
        """`etcd`: HOST:PORT of the cluster's etcd; `scope`: Patroni's
        scope. The agents come from the nodes' tags (tags())."""
        argv = _tls_free(self.replica)
        return [program] + substitute(argv[1:], [
            ("etcd1:2379,etcd2:2379,etcd3:2379", etcd),
            ("/service/main/leader", "/service/%s/leader" % scope),
            ("/var/lib/walship/main", dest), ("replica-1", name),
            ("0.0.0.0:7402", serve_listen)])

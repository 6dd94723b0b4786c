"""The source rules of source_lint.py: first the scanner itself, on small
snippets, then the rules over every source of agent/, replica/, common/ and
status/ (the Bazel data of this test). A failure names file:line."""

import os
import unittest

from tests.lint import source_lint

# Directories whose sources the rules cover, relative to the workspace.
SCANNED = ("agent", "replica", "common", "status")


def _is_seam(path):
    """The seam itself may make the calls everything else must not."""
    return path.startswith("common/sys/") or path == "common/clock.h"


def _sources(root):
    """Workspace-relative paths of the C++ sources under `root`."""
    out = []
    for top in SCANNED:
        for d, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith((".cc", ".h")):
                    out.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(out)


def _seam(code):
    return [what for _, what in source_lint.seam_violations(
        source_lint.strip_code(code))]


class StripTest(unittest.TestCase):

    def test_comments_strings_and_directives_go_line_numbers_stay(self):
        code = ('#include <unistd.h>\n'
                '#define X(a) \\\n  close(a)\n'
                'int f() {  // open(path)\n'
                '  /* read(fd)\n  write(fd) */ const char* s = "fsync(fd)";\n'
                "  char c = '\"'; auto r = R\"x(stat(\"p\"))x\";\n"
                '  return 1\'000;\n}\n')
        stripped = source_lint.strip_code(code)
        self.assertEqual(stripped.count("\n"), code.count("\n"))
        for gone in ("include", "close", "open", "read", "write", "fsync",
                     "stat"):
            self.assertNotIn(gone, stripped)
        self.assertIn("return 1'000;", stripped)


class SeamTest(unittest.TestCase):

    def test_free_calls_are_found(self):
        self.assertEqual(_seam("int fd = open(p, O_RDONLY);"), ["open()"])
        self.assertEqual(_seam("  ::close(fd);"), ["::close()"])
        self.assertEqual(_seam("std::rename(a, b);"), ["std::rename()"])
        self.assertEqual(_seam("if (stat(p, &st) == 0) {"), ["stat()"])
        self.assertEqual(_seam("return getpid();"), ["getpid()"])
        self.assertEqual(_seam("x = !isatty(1) && time(nullptr);"),
                         ["isatty()", "time()"])

    def test_time_sleeps_and_streams_are_found(self):
        self.assertEqual(_seam("auto t = absl::Now();"), ["absl::Now()"])
        self.assertEqual(_seam("absl::SleepFor(absl::Seconds(1));"),
                         ["absl::SleepFor()"])
        self.assertEqual(_seam("std::this_thread::sleep_for(d);"),
                         ["std::this_thread::sleep_*"])
        self.assertEqual(_seam("auto n = std::chrono::steady_clock::now();"),
                         ["std::chrono clock"])
        self.assertEqual(_seam("std::ifstream in(path);"), ["std::fstream"])

    def test_calls_through_the_seam_are_not(self):
        for code in ("sys_.Open(p, 0, 0);", "r = sys.Stat(p, &st);",
                     "fd.close();", "conn->read(buf);", "sys::Mkdir(p);",
                     "clock_.Now();", "clock.SleepFor(d);", "Foo::open(x);",
                     "reopen(x);", "int close(int fd);", "ShutdownAll(x);",
                     'spdlog::info("open(x)");', "// stat(p)",
                     "absl::Time now = clock_.Now();"):
            self.assertEqual(_seam(code), [], code)


def _lengths(code):
    return [last - first + 1
            for first, last in source_lint.functions(
                source_lint.strip_code(code))]


class FunctionTest(unittest.TestCase):

    def test_function_bodies_are_measured_from_brace_to_brace(self):
        code = ("namespace a {\nnamespace {\n"
                "int F(int x) {\n  if (x) {\n    return 1;\n  }\n"
                "  auto g = [] {\n    return 2;\n  };\n  return g();\n}\n"
                "}  // namespace\n}  // namespace a\n")
        self.assertEqual(_lengths(code), [9])

    def test_class_bodies_do_not_count_their_methods_do(self):
        code = ("class C : public B {\n public:\n"
                "  int F() const override {\n    return 1;\n  }\n"
                "  struct S {\n    int v{0};\n  };\n"
                "  template <class T> void G(T t) { t(); }\n"
                "  int x_{1};\n};\n"
                "C::C() : x_{2}, y_(3) {\n  Init();\n}\n")
        self.assertEqual(sorted(_lengths(code)), [1, 3, 3])

    def test_initializers_at_namespace_scope_are_not_functions(self):
        code = ("const int kTable[] = {\n  1,\n  2,\n};\n"
                "enum class E { kA, kB };\n"
                "extern \"C\" {\nint F(void);\n}\n")
        self.assertEqual(_lengths(code), [])

    def test_long_functions_and_files_are_reported(self):
        body = "".join("  x += %d;\n" % i for i in range(120))
        code = "void F() {\n" + body + "}\n"
        problems = source_lint.check_file("a.cc", code, seam=False)
        self.assertEqual(problems,
                         ["a.cc:1: function has 122 lines (at most 120)"])
        problems = source_lint.check_file("b.cc", "\n" * 701, seam=False)
        self.assertEqual(problems, ["b.cc:701: file has 701 lines (at most 700)"])
        self.assertEqual(source_lint.check_file("c.cc", "\n" * 700), [])


class TreeTest(unittest.TestCase):
    """The rules over the workspace's sources (this test's runfiles)."""

    def setUp(self):
        self.paths = _sources(".")
        self.assertGreater(len(self.paths), 50,
                           "the sources are missing from the runfiles")

    def test_sources_keep_the_rules(self):
        problems = []
        for path in self.paths:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            problems += source_lint.check_file(path, text,
                                               seam=not _is_seam(path))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_every_source_is_scanned(self):
        # The runfiles link to the workspace: every source there must be in
        # this test's data (a new package adds its :lint_sources to
        # tests/lint/BUILD).
        anchor = "common/clock.h"
        real = os.path.realpath(anchor)
        if not real.endswith(os.sep + anchor) or real == os.path.abspath(
                anchor):
            self.skipTest("the runfiles are copies; cannot find the workspace")
        root = real[:-len(anchor) - 1]
        missing = sorted(set(_sources(root)) - set(self.paths))
        self.assertEqual(
            missing, [], "not in //tests/lint's data (add the package's "
            ":lint_sources to tests/lint/BUILD): " + ", ".join(missing))


if __name__ == "__main__":
    unittest.main()

"""Source rules that keep the architecture true (issue "Injected time and the
whole seam"), checked by reading the C++ sources:

  * seam: production code outside common/sys/ and common/clock.h never reads
    the time, sleeps, or makes a libc/system call directly; it goes through
    walship::Clock and sys::SysCalls, so tests and fault injectors reach
    every call;
  * size: no function longer than MAX_FUNCTION_LINES, no source file longer
    than MAX_FILE_LINES.

The scanner is deliberately simple: it blanks out comments, string and
character literals and preprocessor lines, then looks for calls written as
free calls (`open(`, `::open(`, `std::rename(`), not as members
(`sys_.Open(`, `x.close(`) or in another namespace (`sys::Mkdir(`); and it
counts braces, a `{` at namespace or class scope preceded by `)` opening a
function.
"""

import re

MAX_FUNCTION_LINES = 120
MAX_FILE_LINES = 700

# Calls that read the time or sleep: production code uses walship::Clock.
TIME_PATTERNS = [
    (re.compile(r"\babsl::Now\s*\("), "absl::Now()"),
    (re.compile(r"\babsl::SleepFor\s*\("), "absl::SleepFor()"),
    (re.compile(r"\bsleep_(for|until)\s*\("), "std::this_thread::sleep_*"),
    (re.compile(r"\b(system_clock|steady_clock|high_resolution_clock)::now\s*\("),
     "std::chrono clock"),
    (re.compile(r"\bstd::(ifstream|ofstream|fstream)\b"), "std::fstream"),
]

# libc functions that enter the kernel (or wrap one that does): production
# code calls them through sys::SysCalls.
RAW_CALLS = """
    open openat creat read write pread pwrite readv writev close stat lstat
    fstat fstatat statvfs fstatvfs lseek fcntl ioctl fsync fdatasync
    ftruncate truncate fallocate posix_fadvise rename renameat unlink
    unlinkat mkdir rmdir opendir readdir closedir getdents64 flock chmod
    chown link symlink readlink realpath access dup dup2 dup3 pipe pipe2
    sendfile splice tee poll ppoll select epoll_create1 epoll_ctl epoll_wait
    socket socketpair bind listen accept accept4 connect send sendto sendmsg
    recv recvfrom recvmsg getsockopt setsockopt getsockname getpeername
    shutdown getaddrinfo freeaddrinfo gethostname getpid getppid kill
    waitpid fork execv execve execvp pthread_sigmask sigprocmask sigaction
    signal sigwait sigtimedwait raise inotify_init inotify_init1
    inotify_add_watch time gettimeofday clock_gettime nanosleep usleep sleep
    fopen fdopen freopen mmap munmap getenv setenv system popen isatty
    pthread_setname_np prctl getuid geteuid chdir umask
""".split()

_RAW_CALL = re.compile(
    r"(?P<pre>[\w.>:]*?)(?P<qual>(?:\bstd)?::)?\b(?P<name>" +
    "|".join(RAW_CALLS) + r")\s*\(")


def strip_code(text):
    """Returns `text` with comments, string and character literals and
    preprocessor lines replaced by spaces; newlines are kept, so line
    numbers stay the same."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            if end < 0:
                out.append(c)
                i += 1
                continue
            j = end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():
                out.append(c)  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def seam_violations(code):
    """Yields (line, what) for each direct time, sleep, file-stream or
    libc/system call in stripped `code`."""
    for number, line in enumerate(code.split("\n"), 1):
        for pattern, what in TIME_PATTERNS:
            if pattern.search(line):
                yield number, what
        for m in _RAW_CALL.finditer(line):
            pre, qual = m.group("pre"), m.group("qual") or ""
            if pre.endswith((".", "->")) or pre and not qual:
                continue  # a member call, or part of a longer name
            if pre.endswith("::") or (qual == "::" and pre):
                continue  # qualified by another namespace or class
            if re.search(r"\b(operator|[A-Za-z_]\w*\s+[*&]?)\s*$",
                         line[:m.start("name")]) and not qual:
                # `int close(`, `void read(`: a declaration, not a call,
                # unless it follows `return` or another keyword.
                before = line[:m.start("name")].split()
                if before and before[-1] not in ("return", "else", "do",
                                                 "case", "co_return"):
                    continue
            yield number, qual + m.group("name") + "()"


_TYPE_HEAD = re.compile(r"\s*(?:typedef\s+)?(?:class|struct|union|enum)\b")
# `) : a_(1), b_{` -- a brace in a constructor's member initializers.
_MEMBER_INIT = re.compile(r"(?<!:):(?!:)[^{]*\w\s*$")
_NAMESPACE_HEAD = re.compile(r"\s*(?:inline\s+)?(?:namespace\b|extern\s*\"\")")


def _drop_template_head(head):
    m = re.match(r"\s*template\s*<", head)
    if not m:
        return head
    depth, i = 1, m.end()
    while i < len(head) and depth:
        depth += {"<": 1, ">": -1}.get(head[i], 0)
        i += 1
    return _drop_template_head(head[i:])


def functions(code):
    """Yields (first line, last line) of each function body in stripped
    `code`: from the line of its `{` to the line of its `}`. Lambdas and
    local classes count as part of the function they are in."""
    stack = []  # one of "namespace", "type", "function", "block" per `{`
    head_start = 0
    line = 1
    starts = []
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";{}":
            if c == "{":
                head = _drop_template_head(code[head_start:i])
                if "function" in stack:
                    kind = "block"
                elif _NAMESPACE_HEAD.match(head):
                    kind = "namespace"
                elif _TYPE_HEAD.match(head) and "(" not in head:
                    kind = "type"
                elif ")" in head and not _MEMBER_INIT.search(
                        head[head.rfind(")") + 1:]):
                    kind = "function"
                else:
                    kind = "block"  # an initializer at namespace scope
                stack.append(kind)
                starts.append(line)
            elif c == "}" and stack:
                kind = stack.pop()
                first = starts.pop()
                if kind == "function":
                    yield first, line
            head_start = i + 1


def check_file(path, text, seam=True, sizes=True):
    """Returns the problems in one source file, each "path:line: what"."""
    problems = []
    code = strip_code(text)
    if seam:
        for number, what in seam_violations(code):
            problems.append("%s:%d: calls %s directly; go through "
                            "sys::SysCalls or walship::Clock" %
                            (path, number, what))
    if sizes:
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > MAX_FILE_LINES:
            problems.append("%s:%d: file has %d lines (at most %d)" %
                            (path, lines, lines, MAX_FILE_LINES))
        for first, last in functions(code):
            length = last - first + 1
            if length > MAX_FUNCTION_LINES:
                problems.append("%s:%d: function has %d lines (at most %d)" %
                                (path, first, length, MAX_FUNCTION_LINES))
    return problems

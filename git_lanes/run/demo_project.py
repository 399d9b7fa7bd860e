"""The sample project of `git lanes demo`: textkit, its initiative, and what the scripted executor
writes. Data only."""

from __future__ import annotations

import shlex

SLUG = "textkit"
CORRECTED_TASK = "wordfreq"
CLI_MARKER = "# -- end of commands (each task adds its command above this line) --"


def _unittest(body: str, imports: tuple[str, ...] = ()) -> str:
    """A test module of the sample project: its imports, `body`, and the unittest main."""
    return "\n".join(sorted([*imports, "import unittest"])) + "\n" + body + \
        '\n\nif __name__ == "__main__":\n    unittest.main()\n'


# -- the sample project ------------------------------------------------------------------------------

PROJECT: dict[str, str] = {
    "README.md": """\
# textkit

A tiny text toolkit: the sample project of `git lanes demo`.

    python3 -m unittest discover -s tests -t .     # the test suite (stdlib only)
    python3 -m textkit.cli slug Hello World        # once the initiative has run

The initiative `.lanes/textkit/` adds the features; see `docs/usage.md` once it has run.
""",
    ".gitignore": "__pycache__/\n*.pyc\n",
    "textkit/__init__.py": '"""textkit: small text utilities (the git-lanes demo project)."""\n\n__version__ = "0.1.0"\n',
    "textkit/cli.py": f'''\
"""Command line: python3 -m textkit.cli COMMAND TEXT..."""

import sys

COMMANDS = {{}}

{CLI_MARKER}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: python3 -m textkit.cli {{" + ",".join(sorted(COMMANDS)) + "}} TEXT...", file=sys.stderr)
        return 2
    print(COMMANDS[argv[0]](" ".join(argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
''',
    "tests/__init__.py": "",
    "tests/test_package.py": _unittest('''
import textkit


class Package(unittest.TestCase):
    def test_version(self):
        self.assertEqual(textkit.__version__, "0.1.0")
'''),
    "tests/test_tokens.py": _unittest('''

class Tokens(unittest.TestCase):
    def test_lower_case_words(self):
        from textkit.tokens import tokens
        self.assertEqual(tokens("Hello, World! hello"), ["hello", "world", "hello"])

    def test_empty(self):
        from textkit.tokens import tokens
        self.assertEqual(tokens(" ... "), [])
'''),
    "tests/test_wordfreq.py": _unittest('''

class TopWords(unittest.TestCase):
    def test_most_frequent_first(self):
        from textkit.wordfreq import top_words
        self.assertEqual(top_words("b a B", 1), [("b", 2)])

    def test_ties_in_alphabetical_order(self):
        from textkit.wordfreq import top_words
        self.assertEqual(top_words("pear apple pear apple fig", 2), [("apple", 2), ("pear", 2)])
'''),
    "tests/test_summary.py": _unittest('''

class Summary(unittest.TestCase):
    def test_summary(self):
        from textkit.summary import summarize
        self.assertEqual(summarize("b a b c"), "4 words; top: b, a, c")
'''),
    "tests/test_slugify.py": _unittest('''

class Slugify(unittest.TestCase):
    def test_slug(self):
        from textkit.slugify import slugify
        self.assertEqual(slugify("  Hello, World! "), "hello-world")
'''),
    "tests/test_cli.py": _unittest('''

def run(*argv):
    from textkit import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue().strip()


class SlugCommand(unittest.TestCase):
    def test_slug(self):
        self.assertEqual(run("slug", "Hello", "World"), (0, "hello-world"))


class SummaryCommand(unittest.TestCase):
    def test_summary(self):
        self.assertEqual(run("summary", "b a b c"), (0, "4 words; top: b, a, c"))
''', ("import contextlib", "import io")),
    "tests/test_docs.py": _unittest('''

class Usage(unittest.TestCase):
    def test_usage_names_every_command(self):
        text = pathlib.Path("docs/usage.md").read_text()
        for command in ("slug", "summary"):
            self.assertIn(command, text)
''', ("import pathlib",)),
}

# (task, goal, scope, blocked_by, [(id, text, test name)])
TASKS = [
    ("tokens", "Split text into lower-case word tokens (textkit.tokens.tokens)", ["textkit/tokens.py"], [],
     [("A1", "words come out lower-cased, punctuation dropped", "tests.test_tokens")]),
    ("wordfreq", "Count the most frequent words (textkit.wordfreq.top_words), ties in alphabetical order",
     ["textkit/wordfreq.py"], ["tokens"],
     [("A1", "most frequent first, ties alphabetical", "tests.test_wordfreq")]),
    ("summary", "Summarize a text: its word count and top three words (textkit.summary.summarize)",
     ["textkit/summary.py"], ["wordfreq"], [("A1", "the summary line", "tests.test_summary")]),
    ("slugify", "Turn a title into a URL slug (textkit.slugify.slugify)", ["textkit/slugify.py"], [],
     [("A1", "slugs are lower-case words joined by dashes", "tests.test_slugify")]),
    ("cli-slug", "Add the `slug` command to the command line", ["textkit/cli.py"], ["slugify"],
     [("A1", "`slug TEXT` prints the slug", "tests.test_cli.SlugCommand")]),
    ("cli-summary", "Add the `summary` command to the command line", ["textkit/cli.py"], ["summary"],
     [("A1", "`summary TEXT` prints the summary", "tests.test_cli.SummaryCommand")]),
    ("docs", "Document the command line in docs/usage.md", ["docs"], [],
     [("A1", "the usage page names every command", "tests.test_docs")]),
]


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def initiative_files(python: str) -> dict[str, str]:
    folder = f".lanes/{SLUG}"
    py = shlex.quote(python)
    files = {f"{folder}/initiative.toml": (
        'title = "textkit: tokens, word counts, summaries, slugs and a command line"\n'
        "tasks = [" + ", ".join(_toml_str(t[0]) for t in TASKS) + "]\n"
        f"final_checks = [{_toml_str(f'{python} -m unittest discover -s tests -t .')}]\n")}
    for task, goal, scope, blocked_by, acceptance in TASKS:
        lines = [f"task_id = {_toml_str(task)}", "revision = 1", f"goal = {_toml_str(goal)}",
                 "scope = [" + ", ".join(_toml_str(s) for s in scope) + "]"]
        if blocked_by:
            lines.append("blocked_by = [" + ", ".join(_toml_str(b) for b in blocked_by) + "]")
        for aid, text, test in acceptance:
            lines += ["", "[[acceptance]]", f"id = {_toml_str(aid)}", f"text = {_toml_str(text)}",
                      f"check = {_toml_str(f'{py} -m unittest -q {test}')}", "timeout = 120"]
        files[f"{folder}/{task}.toml"] = "\n".join(lines) + "\n"
    return files


# -- what the scripted executor writes ------------------------------------------------------------------

WORK: dict[str, dict[str, str]] = {
    "tokens": {"textkit/tokens.py": '''\
"""Word tokens."""

import re


def tokens(text):
    """The lower-case words of `text`, in order, punctuation dropped."""
    return re.findall(r"[a-z0-9]+", text.lower())
'''},
    "summary": {"textkit/summary.py": '''\
"""One-line summaries."""

from textkit.tokens import tokens
from textkit.wordfreq import top_words


def summarize(text):
    """`N words; top: a, b, c`."""
    top = ", ".join(word for word, _count in top_words(text, 3))
    return f"{len(tokens(text))} words; top: {top}"
'''},
    "slugify": {"textkit/slugify.py": '''\
"""URL slugs."""

import re


def slugify(text):
    """Lower-case words joined by dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
'''},
    "docs": {"docs/usage.md": '''\
# Using textkit

    python3 -m textkit.cli slug Hello World      # hello-world
    python3 -m textkit.cli summary b a b c       # 4 words; top: b, a, c

- `slug TEXT`: the URL slug of TEXT.
- `summary TEXT`: the word count and the three most frequent words.
'''},
}

WORDFREQ_BUGGY = '''\
"""Word frequencies."""

from collections import Counter

from textkit.tokens import tokens


def top_words(text, n=3):
    """The `n` most frequent words with their counts."""
    return Counter(tokens(text)).most_common(n)
'''

WORDFREQ_FIXED = '''\
"""Word frequencies."""

from collections import Counter

from textkit.tokens import tokens


def top_words(text, n=3):
    """The `n` most frequent words with their counts, most frequent first, ties alphabetical."""
    counts = Counter(tokens(text))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
'''

CLI_COMMANDS = {
    "cli-slug": 'from textkit.slugify import slugify  # noqa: E402\nCOMMANDS["slug"] = slugify\n',
    "cli-summary": 'from textkit.summary import summarize  # noqa: E402\nCOMMANDS["summary"] = summarize\n',
}

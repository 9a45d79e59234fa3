"""The verl command of a bash launch script, and its Hydra overrides as bash would pass them.

Read as bash reads them: line continuations, comments, `NAME=value` (also after `export`) from the script or the
environment, `$NAME`, `${NAME}`, `${NAME:-default}` (and `-`, `:=`, `=`, `:+`), `$((...))` integer arithmetic,
`$1`…`$9`, `$@` and `shift` (the script's own arguments), word splitting of unquoted expansions, quoting ('…'
literal, "…" expanding, backslash escapes), and the command `python3 -m verl.trainer.main_ppo [--config-name N]
key=value ...` (or `torchrun ... -m verl.trainer.fsdp_sft_trainer ...`) up to a pipe, `;`, `&&` or a redirection.
Command substitutions are not run, and `if`, loops and functions are not evaluated: assignments inside them apply in
order. Each of these leaves a note.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

Segment = tuple[str, str]  # (text, quote): quote "" (bare, expanded and split), '"' (expanded) or "'" (literal)
Word = list[Segment]

SFT_MODULE = re.compile(r"(^|\.)(fsdp_)?sft_trainer$")  # verl's SFT trainers
VERL_MODULE = re.compile(rf"(^|\.)main_ppo(_megatron)?$|{SFT_MODULE.pattern}")
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
KEYWORDS = ("then", "else", "do", "{", "}", "fi", "done", "esac", "!")
COMPOUND = ("if", "elif", "while", "until", "for", "case", "function", "[", "[[", "test")
DECLARE = ("export", "declare", "local", "readonly", "typeset")
ESCAPED = re.compile(r'\\([\\"$`])')
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$]")
UNRUN = re.compile(r"\$\((?!\()|`")
PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9])(?:(:?[-=+])(.*))?", re.S)


class ScriptError(ValueError):
    """A launch script that cannot be read; the message says where and what to do."""


@dataclass
class VerlCommand:
    """What a verl launch runs: its module, `--config-name`, and the overrides in order (`key=value`, `+key=...`)."""

    module: str | None = None
    config_name: str | None = None
    overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what of the script was not evaluated


def read_script(text: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> VerlCommand:
    """The verl command of a launch script run as `bash script args...` with environment `env`; a text of bare
    overrides (no verl command, every word `key=value`) is read as those overrides."""
    shell = _Shell(dict(env or {}), list(args))
    loose: list[str] = []
    for raw in _split_commands(text):
        words = shell.words(raw)
        if words is None:
            continue
        if "-m" in words[:-1] and VERL_MODULE.search(words[words.index("-m") + 1]):
            command = _verl_command(words[words.index("-m") + 1:], shell.notes)
            command.overrides += _torchrun_size(words[:words.index("-m")], command.notes)
            return command
        loose += words
    if loose and all("=" in word for word in loose):
        return VerlCommand(overrides=loose, notes=shell.notes)
    raise ScriptError("found no `python3 -m verl.trainer.main_ppo ...` command (or main_ppo_megatron, "
                      "fsdp_sft_trainer, sft_trainer); give the launch script, or its key=value overrides")


def _torchrun_size(launcher: list[str], notes: list[str]) -> list[str]:
    """torchrun's `--nnodes` and `--nproc_per_node` as trainer overrides: verl's SFT trainer runs on the processes
    torchrun starts, whatever its trainer.* sizes say."""
    if not launcher or not launcher[0].endswith("torchrun"):
        return []
    sizes, words = {}, iter(launcher[1:])
    for word in words:
        option, eq, value = word.partition("=")
        name = {"--nnodes": "trainer.nnodes", "--nproc_per_node": "trainer.n_gpus_per_node",
                "--nproc-per-node": "trainer.n_gpus_per_node"}.get(option)
        if name is not None:
            value = value if eq else next(words, "")
            if value.isdigit():
                sizes[name] = value
    if sizes:
        notes.append(f"the run's size is torchrun's: {', '.join(f'{k}={v}' for k, v in sizes.items())}")
    return [f"{key}={value}" for key, value in sizes.items()]


def _verl_command(words: list[str], notes: list[str]) -> VerlCommand:
    command = VerlCommand(module=words[0], notes=notes)
    rest = iter(words[1:])
    for word in rest:
        option, eq, value = word.partition("=")
        if option in ("--config-name", "-cn", "--config-path", "-cp"):
            value = value if eq else next(rest, "")
            if option in ("--config-name", "-cn"):
                command.config_name = value.removesuffix(".yaml")
        elif "=" in word and not word.startswith("-"):
            command.overrides.append(word)
        else:
            notes.append(f"ignored {word!r} on the verl command line (not a key=value override)")
    return command


def _split_commands(text: str) -> Iterator[list[Word]]:
    """The script's simple commands, each a list of words not yet expanded; redirections dropped."""
    lexer = _Lexer(text.replace("\\\n", ""))
    yield from lexer.commands()


class _Lexer:
    def __init__(self, text: str):
        self.text, self.i = text, 0
        self.command: list[Word] = []
        self.word: Word = []
        self.redirect = False

    def commands(self) -> Iterator[list[Word]]:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c in " \t":
                self._end_word()
            elif c in ";&|\n":
                self._end_word()
                if self.command:
                    yield self.command
                self.command, self.redirect = [], False
            elif c in "<>":
                self._redirection()
                continue
            elif c == "#" and not self.word:
                self.i = text.find("\n", self.i) if "\n" in text[self.i:] else len(text)
                continue
            elif c in "'\"":
                self._quoted(c)
                continue
            elif c == "\\":
                self.word.append((text[self.i + 1:self.i + 2], "'"))
                self.i += 1
            else:
                self._bare()
                continue
            self.i += 1
        self._end_word()
        if self.command:
            yield self.command

    def _end_word(self) -> None:
        if self.word and not self.redirect:
            self.command.append(self.word)
        elif self.word:
            self.redirect = False
        self.word = []

    def _redirection(self) -> None:
        if all(quote == "" and text.isdigit() for text, quote in self.word):
            self.word = []  # the file descriptor of 2>...
        self._end_word()
        while self.i < len(self.text) and self.text[self.i] in "<>&":
            self.i += 1
        self.redirect = True  # the next word is its target

    def _quoted(self, quote: str) -> None:
        end = _closing_quote(self.text, self.i)
        inner = self.text[self.i + 1:end]
        if quote == "'":
            self.word.append((inner, quote))
        else:  # a backslash-escaped character is literal: a segment of its own
            parts = ESCAPED.split(inner)
            self.word += [(part, '"' if index % 2 == 0 else "'") for index, part in enumerate(parts)]
        self.i = end + 1

    def _bare(self) -> None:
        text, start, i = self.text, self.i, self.i
        while i < len(text) and text[i] not in " \t;&|\n<>'\"\\":
            i = _expansion_end(text, i) if text[i] in "$`" else i + 1
        self.word.append((text[start:i], ""))
        self.i = i


def _closing_quote(text: str, i: int) -> int:
    """The index of the quote that closes the one at `i` (in double quotes, past escapes and expansions)."""
    j = i + 1
    while j < len(text) and text[j] != text[i]:
        if text[i] == '"' and text[j] == "\\":
            j += 2
        else:
            j = _expansion_end(text, j) if text[i] == '"' and text[j] == "$" else j + 1
    if j >= len(text):
        raise ScriptError(f"a {text[i]} opened at {text[i:i + 40]!r} is never closed")
    return j


def _expansion_end(text: str, i: int) -> int:
    """The index after the `$(...)`, `${...}` or backtick expansion at `i` (i + 1 for a plain `$`)."""
    pairs = {"$(": ("(", ")"), "${": ("{", "}")}
    if text[i] == "`":
        end = text.find("`", i + 1)
        return len(text) if end < 0 else end + 1
    if text[i:i + 2] not in pairs:
        return i + 1
    opener, closer = pairs[text[i:i + 2]]
    depth, j = 0, i + 1
    while j < len(text):
        depth += (text[j] == opener) - (text[j] == closer)
        j += 1
        if depth == 0:
            return j
    raise ScriptError(f"{text[i:i + 40]!r} is never closed")


class _Shell:
    """Variables, arguments and the expansion of words, as bash does them for the commands of a script."""

    def __init__(self, env: dict[str, str], args: list[str]):
        self.vars, self.args, self.notes = env, args, []

    def words(self, raw: list[Word]) -> list[str] | None:
        """A command's words expanded; None for a command that only assigns variables or is a shell keyword."""
        while raw and _plain(raw[0]) in KEYWORDS:
            raw = raw[1:]
        if not raw:
            return None
        if _plain(raw[0]) in COMPOUND:
            self._note(f"`{_plain(raw[0])} ...` is not evaluated: the assignments inside apply in order")
            return None
        if _plain(raw[0]) == "shift":  # `shift 2`: the script's first arguments were its own (nproc, save path)
            count = self.expand(raw[1], split=False)[0] if len(raw) > 1 else "1"
            self.args = self.args[int(count) if count.isdigit() else 1:]
            return None
        if _plain(raw[0]) in DECLARE:
            raw = [w for w in raw[1:] if not _plain(w).startswith("-")]
            raw = [w for w in raw if ASSIGNMENT.match(_plain_start(w))]  # `export NAME` alone assigns nothing
        assignments = [ASSIGNMENT.match(_plain_start(word)) for word in raw]
        if all(assignments):
            for word, match in zip(raw, assignments):
                value = [(word[0][0][match.end():], "")] + word[1:]
                self.vars[match.group(1)] = " ".join(self.expand(value, split=False))
            return None
        return [text for word in raw for text in self.expand(word)]

    def expand(self, word: Word, split: bool = True) -> list[str]:
        if word in ([("$@", '"')], [("$*", '"')]):
            return list(self.args)
        raw = "".join(t for t, _ in word)
        text = "".join(self._expand_text(t) if quote != "'" else t for t, quote in word)
        # bash splits what unquoted expansions give; a command substitution left as written stays one word
        if split and all(quote == "" for _, quote in word) and "$" in raw and not UNRUN.search(raw):
            return text.split()
        return [text]

    def _expand_text(self, text: str, dequote: bool = False) -> str:
        """`text` with its expansions done; `dequote`: its quotes removed too, as in a `${NAME:-"word"}` word."""
        out, i = [], 0
        while i < len(text):
            c = text[i]
            if dequote and c in "'\"":
                end = _closing_quote(text, i)
                inner = text[i + 1:end]
                out.append(inner if c == "'" else self._expand_text(inner))
                i = end + 1
            elif c in "$`":
                end = _expansion_end(text, i)
                name = NAME.match(text, i + 1) if end == i + 1 else None
                if name:
                    out.append(self._lookup(name.group(), note=True))
                    end = name.end()
                else:
                    out.append(self._substitute(text[i:end]))
                i = end
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def _substitute(self, construct: str) -> str:
        if construct.startswith("$((") and construct.endswith("))"):
            return self._arithmetic(construct[3:-2])
        if construct.startswith("${"):
            return self._parameter(construct[2:-1])
        if construct.startswith(("$(", "`")):
            self._note(f"{construct!r} is not run: it stays as written")
        return construct

    def _lookup(self, name: str, note: bool = False) -> str:
        if name in ("@", "*"):
            return " ".join(self.args)
        if name.isdigit():
            index = int(name) - 1
            return self.args[index] if 0 <= index < len(self.args) else ""
        if name not in self.vars and note:
            self._note(f"${name} is set neither in the script nor in the environment: empty, as bash leaves it")
        return self.vars.get(name, "")

    def _parameter(self, body: str) -> str:
        match = PARAM.fullmatch(body)
        if match is None:
            self._note(f"${{{body}}} is not understood: empty")
            return ""
        name, op, alternative = match.groups()
        if op is None:
            return self._lookup(name, note=True)
        value = self.vars.get(name) if not name.isdigit() else self._lookup(name) or None
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("+"):
            return "" if unset else self._expand_text(alternative, dequote=True)
        if not unset:
            return value
        value = self._expand_text(alternative, dequote=True)
        if op.endswith("="):
            self.vars[name] = value
        return value

    def _arithmetic(self, expression: str) -> str:
        text = self._expand_text(expression)
        try:
            return str(_evaluate(ast.parse(text.strip(), mode="eval").body, self.vars))
        except (SyntaxError, ValueError, KeyError, ZeroDivisionError) as e:
            self._note(f"$(({expression})) is not integer arithmetic megarl can evaluate ({e}): empty")
            return ""

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _evaluate(node: ast.AST, variables: Mapping[str, str]) -> int:
    """bash's integer arithmetic (+ - * / % **, parentheses, variables by bare name) on a parsed expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return int(variables.get(node.id) or 0)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, variables)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left, variables), _evaluate(node.right, variables))
    raise ValueError(ast.dump(node)[:40])


def _plain(word: Word) -> str:
    """A word's text when it is one bare segment (a keyword or option), else ''."""
    return word[0][0] if len(word) == 1 and word[0][1] == "" else ""


def _plain_start(word: Word) -> str:
    return word[0][0] if word and word[0][1] == "" else ""

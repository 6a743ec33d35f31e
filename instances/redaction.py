"""User data as seen by those who may not read its credentials (project admins see it as written).

Hidden: values under credential keys (passwd, *_private, tokens, ...), chpasswd lines, URL
passwords, credential files (.pgpass, .netrc, ...), the values of a .env, and secrets inside text
(`X_PASSWORD=...`, `pass = `, JSON's "auth", Authorization headers, `-p`/`-u` flags, PEM keys, input
piped to chpasswd or a registry login). Base64 or gzip files, YAML with aliases and user data over
the cap are hidden whole. Patterns are RE2: linear time.
"""

import functools
import re
from collections.abc import Callable

import yaml

from instances.bounded_yaml import yaml_compose
from instances.validators import USER_DATA_MAX_BYTES

HIDDEN = "••••••••"
CREDENTIAL_WORDS = ("passw", "secret", "token", "private", "credential")
CREDENTIAL_ENDINGS = ("_key", "_cert")
CREDENTIAL_FILES = (".pgpass", "pgpass.conf", ".netrc", "_netrc", ".git-credentials")
_KEYWORD = r"(?:passw|secret|token|private|credential|api[_-]?key|access[_-]?key)"
# A word holding a keyword, read from its first character only and without backtracking.
_WORD = rf"(?=[\w.-]*?{_KEYWORD})[\w.-]++"
_VALUE = r"(?:\"[^\"\n]*+\"|'[^'\n]*+'|[^\s\"'|;&]++)"
_FILES = r"(?:\.pgpass|pgpass\.conf|\.netrc|\.git-credentials)"
_REGISTRY_LOGIN = r"(?:docker|podman|nerdctl|buildah|skopeo|helm[ \t]++registry)[ \t]++login"


def _until(*words: str) -> str:
    """Characters of one command up to the next of these words: a scan from one of them never
    runs over the next, so each part of the text is read once."""
    return rf"(?:(?!\b(?:{'|'.join(words)})\b)[^\n|;&])*?"


URL_PASSWORD = re.compile(
    r"((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^\s/:@]++:)[^\s/@]++@", re.IGNORECASE
)


def _unless_read_from(match: re.Match[str]) -> str:
    """--password-stdin / --password-file name where the password comes from: it is kept."""
    flag, separator = match.group(1), match.group(2)
    if separator != "=" and flag.lower().endswith(("stdin", "file")):
        return match.group(0)
    return f"{flag}{separator}{HIDDEN}"


def _if_given_with_b(match: re.Match[str]) -> str:
    """htpasswd takes the password on the command line only with -b among its flags."""
    return match.group(1) + HIDDEN if "b" in match.group(2) else match.group(0)


def _key_body(match: re.Match[str]) -> str:
    return f"{match.group(1)}\n{HIDDEN}\n{match.group(2) or ''}"


# (pattern, replacement): the credential's place in a line of text. Each starts at a fixed word
# or at the first character of a word, and a scan from there stops before the next such start.
KEYWORDS = ("passw", "secret", "token", "private", "credential", "api", "access")
Rule = tuple[tuple[str, ...], re.Pattern[str], str | Callable[[re.Match[str]], str]]
# (words, pattern, replacement): the pattern runs on a text holding one of the words
IN_TEXT: tuple[Rule, ...] = (
    (KEYWORDS, re.compile(rf"(?<![\w.-])(--?{_WORD})(=|[ \t]++)(?!-){_VALUE}", re.I),
     _unless_read_from),
    # a word followed by = or : is looked for first: most words are not, and that test is cheaper
    (KEYWORDS,
     re.compile(rf"((?<![\w.-])(?=[\w.-]++[ \t]*+[=:]){_WORD}[ \t]*+[=:][ \t]*+)"
                rf"(?!-)(?!//){_VALUE}", re.I),
     rf"\1{HIDDEN}"),
    (("bearer",), re.compile(r"(\bBearer[ \t]++)[\w.~+/=-]++", re.I), rf"\1{HIDDEN}"),
    # Authorization: Basic X, token X, Digest X, or a bare credential
    (("authorization",),
     re.compile(r"(\bAuthorization:[ \t]*+(?:[\w-]++[ \t]++)?)[^\s\"'|;&]++", re.I),
     rf"\1{HIDDEN}"),
    # mysql -pSECRET (a bare -p asks for it), and openssl's -passin/-passout pass:SECRET
    (("mysql", "mariadb"),
     re.compile(rf"(\b(?:mysql|mariadb)\w*+{_until('mysql', 'mariadb')}[ \t]-p)(?![ \t-])"
                rf"{_VALUE}"),
     rf"\1{HIDDEN}"),
    (("pass:",), re.compile(rf"(\bpass:){_VALUE}"), rf"\1{HIDDEN}"),
    # curl -u USER:SECRET (a USER alone asks for it), redis-cli -a SECRET
    (("curl",),
     re.compile(rf"(\bcurl\b{_until('curl')}[ \t](?:-u[ \t]*+|--user(?:[ \t]++|=))[\"']?"
                r"[^\s:\"']*+:)[^\s\"'|;&]++"),
     rf"\1{HIDDEN}"),
    (("redis-cli",),
     re.compile(rf"(\bredis-cli\b{_until('redis-cli')}[ \t](?:-a|--pass)[ \t]++)(?!-){_VALUE}"),
     rf"\1{HIDDEN}"),
    # htpasswd -b FILE USER SECRET (the password on the command line; -c, -B... around it)
    (("htpasswd",),
     re.compile(rf"(\bhtpasswd((?:[ \t]++-[a-zA-Z]++)++)(?:[ \t]++\S++){{2}}[ \t]++){_VALUE}"),
     _if_given_with_b),
    # short names: pass = X (an .ini), MYSQL_PWD=X, DB_PASS=X, SSHPASS=X (not PWD, a folder)
    (("pass", "pwd"),
     re.compile(rf"((?<![\w.-])(?:[\w.-]*?[_.-](?:pass|pwd)|(?:ssh)?pass)[ \t]*+[=:][ \t]*+)"
                rf"(?!-)(?!//){_VALUE}", re.I),
     rf"\1{HIDDEN}"),
    # a quoted key, as JSON writes it: "password": "X", a .docker/config.json's "auth": "X"
    (("auth", *KEYWORDS),
     re.compile(rf"(\"(?:(?=[\w.-]*?{_KEYWORD})[\w.-]++|auth)\"[ \t]*+:[ \t]*+)\"[^\"\n]*+\"",
                re.I),
     rf'\1"{HIDDEN}"'),
    # the password flag of sshpass, useradd/usermod and a registry login (-p X or -pX)
    (("sshpass",),
     re.compile(rf"(\bsshpass\b{_until('sshpass')}[ \t]-p[ \t]*+)(?!-){_VALUE}"),
     rf"\1{HIDDEN}"),
    (("useradd", "usermod"),
     re.compile(rf"(\buser(?:add|mod)\b{_until('useradd', 'usermod')}[ \t]-p[ \t]++)(?!-)"
                rf"{_VALUE}"),
     rf"\1{HIDDEN}"),
    (("login",),
     re.compile(rf"(\b{_REGISTRY_LOGIN}\b{_until('login')}[ \t]-p(?:=|[ \t]*+))(?!-){_VALUE}"),
     rf"\1{HIDDEN}"),
    # aws configure set aws_secret_access_key X, npm config set //host/:_authToken X
    (("configure", "config"),
     re.compile(rf"(\b(?:aws[ \t]++configure|(?:npm|yarn|pnpm)[ \t]++config)[ \t]++set[ \t]++"
                rf"(?=\S*?(?:{_KEYWORD}|_auth\b))\S++[ \t]++)(?!-){_VALUE}", re.I),
     rf"\1{HIDDEN}"),
    # vault login X (a token; -method=... logins give key=value pairs, read above)
    (("vault",),
     re.compile(rf"(\bvault[ \t]++login(?:[ \t]++-\S++)*+[ \t]++)(?!-)(?![\w.-]*+=){_VALUE}"),
     rf"\1{HIDDEN}"),
    # a PEM private key's body, to its end (or to the next key, or the end of the text)
    (("private key",),
     re.compile(r"(-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----)(?:(?:(?!-----BEGIN )[\s\S])*?"
                r"(-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)|(?:(?!-----BEGIN )[\s\S])*+)"),
     _key_body),
    # what is echoed into chpasswd, passwd or sudo -S, or into a credentials file
    (("echo", "printf"),
     re.compile(r"\b(echo|printf)\b(?:(?!\b(?:echo|printf)\b)[^|\n])*+\|[ \t]*+"
                r"((?:sudo[ \t]++)?(?:chpasswd|passwd)\b"
                r"|sudo\b[^|\n;&]*?[ \t](?:-[a-zA-Z]*?S|--stdin)\b"
                rf"|{_REGISTRY_LOGIN}\b[^|\n;&]*?[ \t]--password-stdin\b)"),
     rf"\1 {HIDDEN} | \2"),
    (("echo", "printf"),
     re.compile(r"\b(echo|printf)\b(?:(?!\b(?:echo|printf)\b)[^|\n>])*+"
                rf"(>>?[ \t]*+[^\s;&|>]*?{_FILES})\b"),
     rf"\1 {HIDDEN} \2"),
)  # fmt: skip
# NAME=value in a dotenv file, `export` or not; an empty value stays empty
ENV_VALUE = re.compile(
    r"(?m)^([ \t]*+(?:export[ \t]++)?[A-Za-z_][\w.-]*+[ \t]*+=[ \t]*+)[^\s#][^\n]*+"
)
READABLE_ENCODINGS = ("", "text/plain")
COMMAND_LISTS = ("runcmd", "bootcmd")  # each item is a command of its own
# libyaml's emitter where PyYAML has it (its wheels do)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
STR, NULL, BOOL = (f"tag:yaml.org,2002:{name}" for name in ("str", "null", "bool"))
MAP, SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
FALSE = ("false", "no", "off", "n")


class _HiddenWhole(Exception):
    """The document cannot be shown in part: an alias, or a key that is not a scalar."""


def user_data_redacted(text: str) -> str:
    """The user data with its credentials hidden; what does not parse as a cloud-config
    mapping without aliases (never saved so, but) is hidden whole, as is user data over the cap
    (kept from before there was one)."""
    if len(text) > USER_DATA_MAX_BYTES or len(text.encode()) > USER_DATA_MAX_BYTES:
        return HIDDEN
    try:
        # the node graph, redacted and written back: no Python objects built in between
        root = yaml_compose(text)  # within bounds: an alias, for one, is refused
        if not isinstance(root, yaml.MappingNode) or root.tag != MAP:
            return HIDDEN
        shown = yaml.serialize(_redacted(root, "", set()), Dumper=DUMPER, allow_unicode=True)
    except (yaml.YAMLError, _HiddenWhole):
        return HIDDEN
    return "#cloud-config\n" + shown


@functools.lru_cache(maxsize=4096)
def is_credential(key: str) -> bool:
    name = key.lower().replace("-", "_")
    if "public" in name or name == "chpasswd":  # chpasswd: its parts are told apart below
        return False
    return any(word in name for word in CREDENTIAL_WORDS) or name.endswith(CREDENTIAL_ENDINGS)


def is_credentials_file(path: object) -> bool:
    return str(path or "").rstrip().rsplit("/", 1)[-1].endswith(CREDENTIAL_FILES)


def is_env_file(path: object) -> bool:
    """A dotenv file (.env, .env.production, app.env): every value in it is taken as a secret."""
    name = str(path or "").rstrip().rsplit("/", 1)[-1]
    return name == ".env" or name.startswith(".env.") or name.endswith(".env")


def _scalar(node: yaml.Node | None) -> str:
    """A scalar's text ("" for null or false), or a mark that it is not one."""
    if node is None or node.tag == NULL or (node.tag == BOOL and node.value.lower() in FALSE):
        return ""
    return node.value if isinstance(node, yaml.ScalarNode) else "<collection>"


def _hidden() -> yaml.ScalarNode:
    return yaml.ScalarNode(STR, HIDDEN)


def _redacted(node: yaml.Node, key: str, seen: set[int], commands: bool = False) -> yaml.Node:
    """The node with its credentials hidden; `seen` finds a node met twice (an alias)."""
    if id(node) in seen:
        raise _HiddenWhole
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if node.tag in (NULL, BOOL) or (node.value == "" and node.tag == STR):
            return node
        if is_credential(key):
            return _hidden()
        if node.tag == STR:
            node.value = text_redacted(node.value)
        return node
    if is_credential(key):
        return _hidden()
    if isinstance(node, yaml.MappingNode):
        return _mapping_redacted(node, key, seen)
    assert isinstance(node, yaml.SequenceNode)
    items = node.value
    if items and all(isinstance(item, yaml.ScalarNode) and item.tag == STR for item in items):
        for item in items:
            if id(item) in seen:
                raise _HiddenWhole
            seen.add(id(item))
        if not commands:
            return _command_redacted(node)
        lines = "\n".join(item.value for item in items)  # one scan finds most lists clean
        if text_redacted(lines) == lines:
            return node
        for item in items:
            item.value = text_redacted(item.value)
        return node
    node.value = [_redacted(item, key, seen) for item in items]
    return node


def _mapping_redacted(node: yaml.MappingNode, key: str, seen: set[int]) -> yaml.MappingNode:
    values: dict[str, yaml.Node] = {}
    pairs = []
    for name_node, value in node.value:
        if not isinstance(name_node, yaml.ScalarNode) or id(name_node) in seen:
            raise _HiddenWhole
        seen.add(id(name_node))
        name = name_node.value
        values[name] = value
        pairs.append([name_node, _redacted(value, name, seen, name in COMMAND_LISTS)])
    if "content" in values and (
        _scalar(values.get("encoding")).lower() not in READABLE_ENCODINGS
        or is_credentials_file(_scalar(values.get("path")))
    ):  # a write_files entry in base64 or gzip, or a .pgpass
        for pair in pairs:
            if pair[0].value == "content":
                pair[1] = _hidden()
    elif isinstance(values.get("content"), yaml.ScalarNode) and is_env_file(
        _scalar(values.get("path"))
    ):  # STRIPE_KEY=X: the names stay, the values go
        content = values["content"]
        content.value = ENV_VALUE.sub(rf"\1{HIDDEN}", content.value)
    if key == "chpasswd" and "list" in values:  # its older form: "user:password" lines
        lines = values["list"]
        if isinstance(lines, yaml.ScalarNode):
            users = _scalar(lines).splitlines()
        else:
            users = [_scalar(line) for line in lines.value]
        hidden = yaml.SequenceNode(
            SEQ, [yaml.ScalarNode(STR, f"{user.split(':', 1)[0]}:{HIDDEN}") for user in users]
        )
        for pair in pairs:
            if pair[0].value == "list":
                pair[1] = hidden
    node.value = [(name_node, value) for name_node, value in pairs]
    return node


def _command_redacted(node: yaml.SequenceNode) -> yaml.Node:
    """A command written as a list: its arguments say more together than apart."""
    words = [item.value for item in node.value]
    joined = " ".join(words)
    line = text_redacted(joined)
    if line == joined:
        return node
    redacted = [text_redacted(word) if word else word for word in words]
    if line != " ".join(redacted):
        parts = line.split(" ")
        if len(parts) != len(words):
            return yaml.ScalarNode(STR, line)
        redacted = parts
    for item, word in zip(node.value, redacted, strict=True):
        item.value = word
    return node


def text_redacted(text: str) -> str:
    """A line of a command or a file's content with the credentials in it hidden."""
    lowered = text.lower()
    if "://" in lowered:
        text = URL_PASSWORD.sub(rf"\1{HIDDEN}@", text)
    for words, pattern, replacement in IN_TEXT:
        for word in words:
            if word in lowered:  # the word the pattern starts from
                text = pattern.sub(replacement, text)
                break
    return text

"""User data as those who may not read its credentials see it (project admins read it as written).

Hidden: every value under a key that names a credential (cloud-config's passwd, hashed_passwd,
plain_text_passwd, password, the host keys' *_private, Ubuntu Pro's token, Landscape's
registration_key, Red Hat's activation-key, LXD's trust_password, Chef's validation_key and
validation_cert, ...), chpasswd's "user:password" lines, and the password in a URL's user info
(a proxy's, say). Inside any text (runcmd and bootcmd lines, write_files contents) the same
words are looked for: the value of `DB_PASSWORD=...`, `api_token: ...`, `X-Api-Key: ...` or
`--password ...`, a Bearer or Basic credential, `mysql -p...`, `htpasswd -b FILE USER ...`,
openssl's `pass:...`, the body of a PEM private key, and what is piped into chpasswd or passwd.
A command written as a list (`[mysql, -pSECRET]`) is read as the line it runs. A file
written from base64 or gzip is hidden whole: it cannot be read for them. A document with YAML
aliases is hidden whole: an alias can show a credential under another key, and expanding
aliases can make a small document enormous.
"""

import re

import yaml

HIDDEN = "••••••••"
CREDENTIAL_WORDS = ("passw", "secret", "token", "private")
CREDENTIAL_ENDINGS = ("_key", "_cert")
URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s/:@]+:)[^\s/@]+@", re.IGNORECASE)
_WORD = r"[\w.-]*(?:passw|secret|token|private|api[_-]?key|access[_-]?key)[\w.-]*"
_FLAGS = r"(?:[ \t]+-[a-zA-Z]+)"
_HTPASSWD_B = rf"\bhtpasswd(?={_FLAGS}*?[ \t]+-[a-zA-Z]*b){_FLAGS}+"  # with -b among its flags
_VALUE = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'|;&]+)"
IN_TEXT = (  # (pattern, replacement): the credential's place in a line of text
    (re.compile(rf"(--?{_WORD})(=|[ \t]+)(?!-)(?<!stdin[ \t])(?<!file[ \t]){_VALUE}", re.I),
     rf"\1\2{HIDDEN}"),
    (re.compile(rf"(\b{_WORD}[ \t]*[=:][ \t]*)(?!-)(?!//){_VALUE}", re.I), rf"\1{HIDDEN}"),
    (re.compile(r"(\bBearer[ \t]+|\bAuthorization:[ \t]*Basic[ \t]+)[\w.~+/=-]+", re.I),
     rf"\1{HIDDEN}"),
    # mysql -pSECRET (a bare -p asks for it), and openssl's -passin/-passout pass:SECRET
    (re.compile(rf"(\b(?:mysql|mariadb)\w*\b[^\n|;&]*?[ \t]-p)(?![ \t-]){_VALUE}"), rf"\1{HIDDEN}"),
    (re.compile(rf"(\bpass:){_VALUE}"), rf"\1{HIDDEN}"),
    # htpasswd -b FILE USER SECRET (the password on the command line; -c, -B... around it)
    (re.compile(rf"({_HTPASSWD_B}[ \t]+\S+[ \t]+\S+[ \t]+){_VALUE}"), rf"\1{HIDDEN}"),
    (re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----).*?(-----END [A-Z0-9 ]*PRIVATE KEY-----)",
                re.S), rf"\1\n{HIDDEN}\n\2"),
    (re.compile(r"\becho\b[^|\n]*\|[ \t]*(sudo[ \t]+)?(chpasswd|passwd)\b"),
     rf"echo {HIDDEN} | \1\2"),
)  # fmt: skip
READABLE_ENCODINGS = ("", "text/plain")


def user_data_redacted(text: str) -> str:
    """The user data with its credentials hidden; what does not parse as a cloud-config
    mapping without aliases (never saved so, but) is hidden whole."""
    try:
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text)):
            return HIDDEN
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return HIDDEN
    if not isinstance(config, dict):
        return HIDDEN
    dumped = yaml.safe_dump(
        _redacted(config), sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return "#cloud-config\n" + dumped


def is_credential(key: str) -> bool:
    name = key.lower().replace("-", "_")
    if "public" in name or name == "chpasswd":  # chpasswd: its parts are told apart below
        return False
    return any(word in name for word in CREDENTIAL_WORDS) or name.endswith(CREDENTIAL_ENDINGS)


def _redacted(node: object, key: str = "") -> object:
    if node is None or node == "" or isinstance(node, bool):
        return node
    if is_credential(key):
        return HIDDEN
    if isinstance(node, dict):
        redacted = {k: _redacted(v, str(k)) for k, v in node.items()}
        if "content" in node and str(node.get("encoding") or "").lower() not in READABLE_ENCODINGS:
            redacted["content"] = HIDDEN  # a write_files entry in base64 or gzip
        if key == "chpasswd" and "list" in node:  # its older form: "user:password" lines
            lines = node["list"]
            lines = lines.splitlines() if isinstance(lines, str) else lines or []
            redacted["list"] = [f"{str(line).split(':', 1)[0]}:{HIDDEN}" for line in lines]
        return redacted
    if isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], str):
        return (node[0], _redacted(node[1], node[0]))  # a pair of !!omap or !!pairs
    if isinstance(node, list | tuple):
        if node and all(isinstance(item, str) for item in node):  # a command as a list
            line = text_redacted(" ".join(node))  # its arguments say more together than apart
            if line != " ".join(text_redacted(item) for item in node):
                parts = line.split(" ")
                return parts if len(parts) == len(node) else line
        return [_redacted(item, key) for item in node]
    if isinstance(node, str):
        return text_redacted(node)
    return node


def text_redacted(text: str) -> str:
    """A line of a command or a file's content with the credentials in it hidden."""
    text = URL_PASSWORD.sub(rf"\1{HIDDEN}@", text)
    for pattern, replacement in IN_TEXT:
        text = pattern.sub(replacement, text)
    return text

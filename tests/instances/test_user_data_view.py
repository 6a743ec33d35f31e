"""Storage > UserData: admins read it as written; everyone else reads it with its credentials
hidden, whether the product generated it or the user wrote it."""

import os
import re
import subprocess
import sys

import pytest
import yaml
from django.urls import reverse

from instances.redaction import HIDDEN, text_redacted, user_data_redacted
from instances.services.instances import instance_create
from instances.validators import USER_DATA_MAX_BYTES
from tests.factories import instance_request

pytestmark = pytest.mark.django_db

CUSTOM = """#cloud-config
# the team's web image
users:
  - name: deploy
    passwd: $6$rounds=4096$salted$hash
    plain_text_passwd: hunter2-but-longer
    lock_passwd: false
chpasswd:
  expire: false
  list: |
    root:r00t-pass
    deploy:d3ploy-pass
ssh_keys:
  ed25519_private: |
    -----BEGIN OPENSSH PRIVATE KEY-----
    b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ
    -----END OPENSSH PRIVATE KEY-----
  ed25519_public: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC7 ops@example.com
ubuntu_pro:
  token: C1A2B3C4D5E6
packages: [nginx]
runcmd:
  - echo "café ouvert" > /etc/motd
"""
SECRETS = ("$6$rounds", "hunter2-but-longer", "r00t-pass", "d3ploy-pass", "b3BlbnNzaC1rZXkt",
           "C1A2B3C4D5E6")  # fmt: skip


def test_credentials_are_hidden_and_the_rest_kept():
    shown = user_data_redacted(CUSTOM)
    assert shown.startswith("#cloud-config\n")
    assert not [secret for secret in SECRETS if secret in shown]
    config = yaml.safe_load(shown)
    assert config["users"][0] == {
        "name": "deploy", "passwd": HIDDEN, "plain_text_passwd": HIDDEN, "lock_passwd": False,
    }  # fmt: skip
    assert config["chpasswd"] == {"expire": False, "list": [f"root:{HIDDEN}", f"deploy:{HIDDEN}"]}
    assert config["ssh_keys"]["ed25519_private"] == HIDDEN
    assert config["ssh_keys"]["ed25519_public"].startswith("ssh-ed25519 AAAA")
    assert config["ubuntu_pro"] == {"token": HIDDEN}
    assert config["packages"] == ["nginx"]
    assert 'echo "café ouvert" > /etc/motd' in shown


def test_credentials_are_hidden_whatever_their_shape_or_place():
    shown = yaml.safe_load(
        user_data_redacted(
            "#cloud-config\n"
            "passwd: {nested: N1}\n"
            "ubuntu_pro: !!omap [{token: T2}]\n"
            "rh_subscription: {activation-key: T3, username: rhel}\n"
            "lxd: {init: {trust_password: T4}}\n"
            "chef: {validation_key: T5, validation_cert: T6, server_url: https://chef}\n"
            "apt: {proxy: 'http://me:T7@proxy:3128', sources: {x: {key: PUBLIC}}}\n"
            "runcmd: ['curl https://ci:T8@example.com/a']\n"
            "users: [{name: a, lock_passwd: true, ssh_authorized_keys: [ssh-ed25519 AAAA]}]\n"
        )
    )
    assert not re.search(r"N1|T[2-8]", str(shown))
    assert shown["passwd"] == HIDDEN
    assert shown["rh_subscription"] == {"activation-key": HIDDEN, "username": "rhel"}
    assert shown["chef"]["server_url"] == "https://chef"
    assert shown["apt"] == {
        "proxy": f"http://me:{HIDDEN}@proxy:3128", "sources": {"x": {"key": "PUBLIC"}},
    }  # fmt: skip
    assert shown["runcmd"] == [f"curl https://ci:{HIDDEN}@example.com/a"]
    assert shown["users"] == [
        {"name": "a", "lock_passwd": True, "ssh_authorized_keys": ["ssh-ed25519 AAAA"]}
    ]


def test_credentials_inside_commands_and_files_are_hidden():
    shown = yaml.safe_load(
        user_data_redacted(
            "#cloud-config\n"
            "runcmd:\n"
            "  - echo DB_PASSWORD=P1 >> /etc/app.env\n"
            "  - [mysql, -u, root, --password=P2]\n"
            "  - mysql --password P3 -e 'select 1'\n"
            "  - \"curl -H 'Authorization: Bearer P4' https://api.example.com\"\n"
            "  - echo 'root:P5' | chpasswd\n"
            "  - docker login --password-stdin < /run/creds\n"
            "bootcmd: [export API_TOKEN='P6 P6']\n"
            "write_files:\n"
            "  - path: /etc/app/config.yaml\n"
            "    content: |\n"
            "      listen: 8080\n"
            "      client_secret: P7\n"
            "  - path: /etc/ssl/private/app.key\n"
            "    permissions: '0600'\n"
            "    content: |\n"
            "      -----BEGIN EC PRIVATE KEY-----\n"
            "      P8\n"
            "      -----END EC PRIVATE KEY-----\n"
            "  - path: /etc/blob\n"
            "    encoding: b64\n"
            "    content: UDk=\n"
        )
    )
    assert not re.search(r"P[1-8]|UDk=", str(shown))
    assert shown["runcmd"] == [
        f"echo DB_PASSWORD={HIDDEN} >> /etc/app.env",
        ["mysql", "-u", "root", f"--password={HIDDEN}"],
        f"mysql --password {HIDDEN} -e 'select 1'",
        f"curl -H 'Authorization: Bearer {HIDDEN}' https://api.example.com",
        f"echo {HIDDEN} | chpasswd",
        "docker login --password-stdin < /run/creds",
    ]
    assert shown["bootcmd"] == [f"export API_TOKEN={HIDDEN}"]
    config, key, blob = shown["write_files"]
    assert config["content"] == f"listen: 8080\nclient_secret: {HIDDEN}\n"
    assert key["permissions"] == "0600" and key["content"] == (
        f"-----BEGIN EC PRIVATE KEY-----\n{HIDDEN}\n-----END EC PRIVATE KEY-----\n"
    )
    assert blob == {"path": "/etc/blob", "encoding": "b64", "content": HIDDEN}


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("mysql -u root -pS3 app", f"mysql -u root -p{HIDDEN} app"),
        ("mysql -u root -p app", "mysql -u root -p app"),  # a bare -p asks for it
        ("mysqladmin -pS3 status", f"mysqladmin -p{HIDDEN} status"),
        ("htpasswd -bc /etc/web.htpasswd ann S3", f"htpasswd -bc /etc/web.htpasswd ann {HIDDEN}"),
        ("htpasswd -B -b /f ann S3 && echo ok", f"htpasswd -B -b /f ann {HIDDEN} && echo ok"),
        ("htpasswd -c /etc/web.htpasswd ann", "htpasswd -c /etc/web.htpasswd ann"),
        ("curl -H 'X-Api-Key: S3' x", f"curl -H 'X-Api-Key: {HIDDEN}' x"),
        ("curl -H 'Authorization: Basic YTpi' x", f"curl -H 'Authorization: Basic {HIDDEN}' x"),
        ("echo basic setup", "echo basic setup"),
        ("openssl rsa -passin pass:S3 -in k", f"openssl rsa -passin pass:{HIDDEN} -in k"),
        ("openssl enc -pass env:KEY", "openssl enc -pass env:KEY"),
    ],
)
def test_passwords_on_common_command_lines_are_hidden(line, shown):
    assert text_redacted(line) == shown


def test_a_command_written_as_a_list_is_read_as_the_line_it_runs():
    shown = yaml.safe_load(
        user_data_redacted(
            "#cloud-config\nruncmd:\n  - [mysql, -u, root, -pS3]\n  - [htpasswd, -b, /f, ann, S3]\n"
        )
    )
    assert shown["runcmd"] == [
        ["mysql", "-u", "root", f"-p{HIDDEN}"],
        ["htpasswd", "-b", "/f", "ann", HIDDEN],
    ]


def test_a_document_with_aliases_is_hidden_whole_and_at_once():
    # an alias shows a value under a second key; aliases of aliases would expand a few hundred
    # bytes into gigabytes
    assert user_data_redacted("#cloud-config\nusers: [{passwd: &p S}]\nx: *p\n") == HIDDEN
    bomb = "#cloud-config\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join([f'*{chr(97 + level)}'] * 10)}]\n"
        for level in range(9)
    )
    assert user_data_redacted(bomb) == HIDDEN


def test_user_data_that_does_not_parse_is_hidden_whole():
    assert user_data_redacted("#cloud-config\nusers: [unclosed") == HIDDEN
    assert user_data_redacted("#cloud-config\njust text") == HIDDEN


def test_only_admins_read_custom_user_data_as_written(client_for, project, operator, subnet):
    instance = instance_create(
        project=project, actor=operator,
        request=instance_request(subnet, user_data_mode="custom", custom_user_data=CUSTOM),
    )  # fmt: skip
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=user-data"
    owner_page = client_for("owner").get(url).text
    assert "# the team&#x27;s web image" in owner_page and "r00t-pass" in owner_page
    for role in ("operator", "viewer"):
        page = client_for(role).get(url).text
        assert not [secret for secret in SECRETS if secret in page], role
        assert "Passwords, tokens and private keys are hidden" in page
        assert "deploy:••••••••" in page and "nginx" in page


def test_the_user_data_is_a_view_of_the_storage_tab(client_for, project, operator, subnet):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    detail = reverse("instance-detail", args=[project.slug, instance.pk])
    storage = client_for("viewer").get(detail + "?tab=storage").text
    assert re.search(r'<nav class="tabs"(?:(?!</nav>).)*>Storage</a>', storage, re.S)
    assert ">User data<" not in storage  # no tab of its own
    assert f'href="{detail}?tab=user-data"' in storage and ">UserData</a>" in storage
    page = client_for("viewer").get(detail + "?tab=user-data").text
    current = re.findall(r'aria-current="page">(\w+)</a>', page)
    assert current[-2:] == ["Storage", "UserData"]  # after the site's own navigation
    assert "Passwords, tokens and private keys are hidden" in page


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("curl -u ann:S3 https://x", f"curl -u ann:{HIDDEN} https://x"),
        ("curl -fsS --user 'ann:S3' https://x", f"curl -fsS --user 'ann:{HIDDEN}' https://x"),
        ("curl -u ann https://x", "curl -u ann https://x"),  # curl asks for it
        ("echo S3 | sudo -S apt-get update", f"echo {HIDDEN} | sudo -S apt-get update"),
        ("echo 'S3' | sudo -kS true", f"echo {HIDDEN} | sudo -kS true"),
        ("curl -H 'Authorization: token S3' x", f"curl -H 'Authorization: token {HIDDEN}' x"),
        ("redis-cli -h db -a S3 ping", f"redis-cli -h db -a {HIDDEN} ping"),
        ("echo 'db:5432:*:ann:S3' > ~/.pgpass", f"echo {HIDDEN} > ~/.pgpass"),
        ("echo ok | sudo tee /x", "echo ok | sudo tee /x"),
    ],
)
def test_the_credentials_a_probe_found_shown_are_hidden(line, shown):
    assert text_redacted(line) == shown


def test_credentials_keys_and_a_written_pgpass_are_hidden():
    shown = yaml.safe_load(
        user_data_redacted(
            "#cloud-config\n"
            "aws:\n  credentials: {access_key_id: AKIA1, region: eu-west-3}\n"
            "write_files:\n"
            "  - path: /home/app/.pgpass\n    permissions: '0600'\n"
            "    content: |\n      db.internal:5432:app:app:S2\n"
            "  - path: /root/.netrc\n    content: machine x login ann password S3\n"
        )
    )
    assert not re.search(r"AKIA1|S[23]", str(shown))
    assert shown["aws"] == {"credentials": HIDDEN}
    assert shown["write_files"][0] == {
        "path": "/home/app/.pgpass", "permissions": "0600", "content": HIDDEN,
    }  # fmt: skip


def _repeats(tree):
    """(op, args, inside a repeat, the node before it) for each repeat of a parsed pattern."""
    from re import _constants as c  # type: ignore[attr-defined]

    found = []

    def walk(items, inside):
        for op, av in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                found.append((op, av[1], inside, list(av[2])))
                walk(av[2], True)
            elif op is c.SUBPATTERN:
                walk(av[3], inside)
            elif op is c.BRANCH:
                for branch in av[1]:
                    walk(branch, inside)
            elif op in (c.ASSERT, c.ASSERT_NOT):
                walk(av[1], inside)
            elif op is c.ATOMIC_GROUP:
                walk(av, inside)

    walk(tree, False)
    return found


def test_no_redaction_pattern_can_backtrack_over_what_it_read():
    # Backtracking engines are slow only where a repeat gives back what it read: greedy
    # repeats. Here every unbounded repeat is possessive (never gives back) or lazy (reads one
    # more character at a time), and a repeat inside another is one character long, read
    # after a look-ahead that stops it at the next place a match could start.
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    from instances.redaction import IN_TEXT, URL_PASSWORD

    for pattern in [URL_PASSWORD, *(rule[1] for rule in IN_TEXT)]:
        for op, most, inside, item in _repeats(_parser.parse(pattern.pattern, pattern.flags)):
            greedy_unbounded = op is c.MAX_REPEAT and most == c.MAXREPEAT
            assert not greedy_unbounded, pattern.pattern
            if inside and op is not c.POSSESSIVE_REPEAT:
                assert most <= 40 or (
                    len(item) == 1 and item[0][0] in (c.IN, c.NOT_LITERAL, c.LITERAL)
                ), pattern.pattern


WORST_CASES = {  # 256 KiB each: near-matches, long lines, no newlines
    name: (unit * (USER_DATA_MAX_BYTES // len(unit)))
    for name, unit in {
        "dashes": "-", "words": "a-", "keywords": "password", "keys": "token=", "flags": "--passw ",
        "quotes": 'secret="', "mysql": "mysql ", "curl": "curl -u ", "redis": "redis-cli -a ",
        "pem": "-----BEGIN RSA PRIVATE KEY-----", "echo": "echo | sudo ", "urls": "a://b:",
        "htpasswd": "htpasswd -b ", "schemes": "a+", "files": "echo >.pgpas",
        "short names": "a_pas", "passes": "pass", "json": '"auth"', "sshpass": "sshpass -p ",
        "logins": "docker login ", "configs": "npm config set token ", "vault": "vault login -x ",
        "useradd": "useradd -p ", "stdin": "echo | docker login ",
    }.items()
}  # fmt: skip


def test_worst_case_texts_at_the_cap_are_redacted_in_one_pass():
    # Not a timing test: the quadratic patterns this replaces took minutes on 32 KiB of dashes;
    # a linear pass over all of these takes well under a second.
    script = (
        "import sys, django; sys.path.insert(0, '.'); django.setup();"
        "from instances.redaction import text_redacted;"
        "from tests.instances.test_user_data_view import WORST_CASES;"
        "[text_redacted(text) for text in WORST_CASES.values()]"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "zopday.settings"}
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("sshpass -p S3 ssh ann@db", f"sshpass -p {HIDDEN} ssh ann@db"),
        ("sshpass -pS3 scp f h:", f"sshpass -p{HIDDEN} scp f h:"),
        ("export MYSQL_PWD=S3", f"export MYSQL_PWD={HIDDEN}"),
        ("cd $PWD && PWD=/srv make", "cd $PWD && PWD=/srv make"),  # the folder, not a secret
        ("docker login -u ann -p S3 reg.example", f"docker login -u ann -p {HIDDEN} reg.example"),
        ("echo S3 | docker login -u ann --password-stdin reg.example",
         f"echo {HIDDEN} | docker login -u ann --password-stdin reg.example"),
        ("aws configure set aws_secret_access_key S3", f"aws configure set aws_secret_access_key {HIDDEN}"),
        ("aws configure set region eu-west-3", "aws configure set region eu-west-3"),
        ("useradd -m -p S3 ann", f"useradd -m -p {HIDDEN} ann"),
        ("npm config set //registry.npmjs.org/:_authToken S3",
         f"npm config set //registry.npmjs.org/:_authToken {HIDDEN}"),
        ("vault login S3", f"vault login {HIDDEN}"),
        ("vault login -method=userpass username=ann password=S3",
         f"vault login -method=userpass username=ann password={HIDDEN}"),
        ("pass = S3", f"pass = {HIDDEN}"),
        ("bypass = S3", "bypass = S3"),
    ],
)  # fmt: skip
def test_the_credentials_a_second_probe_found_shown_are_hidden(line, shown):
    assert text_redacted(line) == shown


def test_secrets_in_a_written_ini_docker_config_and_env_are_hidden():
    shown = yaml.safe_load(
        user_data_redacted(
            "#cloud-config\n"
            "write_files:\n"
            "  - path: /etc/app/settings.ini\n"
            "    content: |\n      [db]\n      user = ann\n      pass = S1\n"
            "  - path: /root/.docker/config.json\n"
            '    content: \'{"auths": {"reg.example": {"auth": "UzI="}}}\'\n'
            "  - path: /srv/app/.env\n"
            "    content: |\n      STRIPE_KEY=S3\n      export REGION=eu-west-3\n      EMPTY=\n"
        )
    )
    assert not re.search(r"S[13]|UzI=|eu-west-3", str(shown))
    ini, docker, env = (file["content"] for file in shown["write_files"])
    assert ini == f"[db]\nuser = ann\npass = {HIDDEN}\n"
    assert docker == f'{{"auths": {{"reg.example": {{"auth": "{HIDDEN}"}}}}}}'
    assert env == f"STRIPE_KEY={HIDDEN}\nexport REGION={HIDDEN}\nEMPTY=\n"

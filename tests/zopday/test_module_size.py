"""scripts/check_module_size.py: which modules it counts, and what it says of the long ones."""

import importlib.util

from tests.services import ROOT

spec = importlib.util.spec_from_file_location(
    "check_module_size", ROOT / "scripts" / "check_module_size.py"
)
assert spec and spec.loader
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n" * lines)


def test_it_lists_the_modules_over_400_lines_longest_first(tmp_path):
    write(tmp_path / "app" / "short.py", 400)
    write(tmp_path / "app" / "long.py", 401)
    write(tmp_path / "app" / "views" / "longer.py", 650)

    assert check.oversized(tmp_path) == [
        (tmp_path.joinpath("app/views/longer.py").relative_to(tmp_path), 650),
        (tmp_path.joinpath("app/long.py").relative_to(tmp_path), 401),
    ]


def test_it_exempts_tests_benchmarks_migrations_and_hidden_folders(tmp_path):
    for folder in ("tests", "benchmarks", "app/migrations", ".venv/lib", "var", "app/tests"):
        write(tmp_path / folder / "big.py", 900)

    assert check.oversized(tmp_path) == []


def test_it_exits_1_naming_each_long_module(tmp_path, capsys):
    write(tmp_path / "app" / "long.py", 401)

    assert check.main(["check_module_size.py", str(tmp_path)]) == 1
    assert capsys.readouterr().out == (
        "app/long.py: 401 lines (limit 400): split it along its seams\n"
    )
    assert check.main(["check_module_size.py", str(tmp_path / "app" / "none")]) == 0

"""Where the demo finds the example configs: the checkout's etc/, else the wheel's copy.

tests/integration/test_packaging.py checks the installed wheel end to end; here, the
rule itself and the link that puts etc/ into the demo package.
"""

from __future__ import annotations

from pathlib import Path

from demo import configs

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_its_own_etc() -> None:
    assert configs.ETC == ROOT / "etc"
    assert configs.agent_template() == ROOT / "etc" / "agent.toml"


def test_an_install_reads_the_copy_in_the_package(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    package = site / "demo"
    (package / "etc").mkdir(parents=True)
    (site / "etc").mkdir()  # some other distribution's etc/: not ours
    (site / "etc" / "agent.toml").write_text("")
    assert configs.find_examples(site, package) == package / "etc"


def test_the_package_copy_is_the_tree_s_etc() -> None:
    """demo/etc links to ../etc: the wheel's copy (package data) is etc/ itself."""
    packaged = Path(configs.__file__).resolve().parent / "etc"
    assert packaged.resolve() == (ROOT / "etc").resolve()

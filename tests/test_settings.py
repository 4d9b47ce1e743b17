"""Settings: defaults are safe, then file, env and flags override in that order."""

from __future__ import annotations

import pytest

from krea_ops.errors import BadInput
from krea_ops.exporters.server import parse_listen
from krea_ops.settings import describe_settings, load_settings


def test_servers_bind_loopback_by_default() -> None:
    settings = load_settings(env={"KREA_OPS_CONFIG": "/nonexistent"})
    assert parse_listen(settings.exporter_listen)[0] == "127.0.0.1"


def test_file_then_env_then_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "exporter_sysfs: /from-file\nexporter_gpm_interval_s: 2\nexporter-fake-gpus: 4\n"
    )
    env = {"KREA_OPS_CONFIG": str(cfg), "KREA_OPS_EXPORTER_GPM_INTERVAL_S": "3.5"}
    s = load_settings({"exporter_fake_gpus": 2}, env=env)
    assert s.exporter_sysfs == "/from-file"
    assert s.exporter_gpm_interval_s == 3.5
    assert s.exporter_fake_gpus == 2


def test_corrupt_settings_file_is_bad_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("exporter_sysfs: [unclosed\n")
    with pytest.raises(BadInput, match="not readable YAML"):
        load_settings(env={"KREA_OPS_CONFIG": str(cfg)})


def test_unknown_setting_and_bad_value_are_bad_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("exporter_colour: red\n")
    with pytest.raises(BadInput, match="unknown setting"):
        load_settings(env={"KREA_OPS_CONFIG": str(cfg)})
    with pytest.raises(BadInput, match="KREA_OPS_EXPORTER_FAKE_GPUS"):
        load_settings(env={"KREA_OPS_CONFIG": "/nonexistent", "KREA_OPS_EXPORTER_FAKE_GPUS": "x"})


@pytest.mark.parametrize("listen", ["9400", "host:9400", "127.0.0.1:99999", "127.0.0.1:"])
def test_bad_listen_addresses(listen: str) -> None:
    with pytest.raises(BadInput):
        parse_listen(listen)


def test_every_setting_is_documented() -> None:
    rows = describe_settings()
    assert rows and all(r["help"] and r["env"].startswith("KREA_OPS_") for r in rows)


def test_every_setting_is_documented_in_the_runbook() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    missing = [r["name"] for r in describe_settings() if f"`{r['name']}`" not in text]
    assert missing == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "localhost:9090",
            "--prometheus 'localhost:9090' has no scheme: use http://localhost:9090",
        ),
        ("ftp://prom:9090", "--prometheus 'ftp://prom:9090': the scheme must be http or https"),
        ("http://", "--prometheus 'http://' has no host: use http://HOST:PORT"),
        ("http://prom:90x", "--prometheus 'http://prom:90x' is not a URL: use http://HOST:PORT"),
    ],
)
def test_a_prometheus_url_is_http_or_https_with_a_host(url: str, message: str) -> None:
    with pytest.raises(BadInput) as exc:
        load_settings({"prometheus_url": url}, env={"KREA_OPS_CONFIG": "/nonexistent"})
    assert str(exc.value) == message


def test_a_url_from_env_or_file_names_where_it_came_from(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"KREA_OPS_CONFIG": "/nonexistent", "KREA_OPS_PROMETHEUS_URL": "prom:9090"}
    with pytest.raises(BadInput, match=r"^KREA_OPS_PROMETHEUS_URL 'prom:9090' has no scheme"):
        load_settings(env=env)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("prometheus_url: prom:9090\n")
    with pytest.raises(BadInput, match=rf"^setting prometheus_url in {cfg}: 'prom:9090' has no"):
        load_settings(env={"KREA_OPS_CONFIG": str(cfg)})
    # a flag replaces a bad value from below it, so only what is used is judged
    assert load_settings({"prometheus_url": "https://prom:9090"}, env=env).prometheus_url == (
        "https://prom:9090"
    )

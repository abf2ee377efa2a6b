"""Chromium's sandbox in the browser harness (fxc/runtime/browser/page.py; issue 41, item 13): it stays on for every
user but root (where Chromium cannot start sandboxed) unless FXC_CHROMIUM_SANDBOX=0 opts out, and a log line says
when and why it is off. Real launches: the harness's browser as this process's user, and Chromium with the flags a
non-root user gets, run as one (nobody), sandboxed."""
import logging
import os
import subprocess
import tempfile

from fxc.runtime.browser.page import FLAGS, launch_options, open_browser, sandbox_options


def test_the_sandbox_stays_on_for_users_other_than_root():
    for uid in (1, 1000, 65534):
        options, why = launch_options(uid)
        assert options["chromium_sandbox"] is True and "--no-sandbox" not in options["args"] and why == ""
        assert options["args"] == FLAGS


def test_root_and_the_opt_out_turn_it_off_and_say_why():
    options, why = launch_options(0)
    assert options["chromium_sandbox"] is False and "--no-sandbox" in options["args"] and "root" in why
    options, why = launch_options(1000, sandbox_opt_out=True)
    assert options["chromium_sandbox"] is False and "FXC_CHROMIUM_SANDBOX=0" in why
    assert "--no-sandbox" not in FLAGS


def test_this_process_logs_when_and_why_it_is_off(caplog, monkeypatch):
    monkeypatch.delenv("FXC_CHROMIUM_SANDBOX", raising=False)
    with caplog.at_level(logging.WARNING, logger="fxc"):
        options, why = sandbox_options()
    assert options["chromium_sandbox"] is (os.geteuid() != 0)
    assert ("runs without its sandbox" in caplog.text and why in caplog.text) is (os.geteuid() == 0)
    monkeypatch.setenv("FXC_CHROMIUM_SANDBOX", "0")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fxc"):
        options, why = sandbox_options()
    assert options["chromium_sandbox"] is False and "runs without its sandbox" in caplog.text


def test_the_harness_launches_as_this_user():
    browser = open_browser()
    page = browser.page("launch-test", [], setup="() => ({sum: 1 + 1, isolated: crossOriginIsolated})")
    assert page.info == {"sum": 2, "isolated": True}
    assert browser.options["chromium_sandbox"] is (os.geteuid() != 0 and os.environ.get("FXC_CHROMIUM_SANDBOX") != "0")


def test_a_non_root_user_gets_a_working_sandboxed_chromium():
    """Chromium with launch_options(uid)'s flags, as a user that is not root (nobody, when this test runs as root),
    renders a page: the sandbox it keeps does start here."""
    with tempfile.TemporaryDirectory(prefix="fxc-sandbox-") as home:    # in /tmp: a folder nobody can reach
        prefix = []
        if os.geteuid() == 0:
            os.chown(home, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        options, _ = launch_options(65534 if os.geteuid() == 0 else os.geteuid())
        assert "--no-sandbox" not in options["args"]
        p = subprocess.run([*prefix, "env", f"HOME={home}", os.environ.get("FXC_CHROMIUM", "/usr/bin/chromium"),
                            *options["args"], f"--user-data-dir={home}/profile", "--dump-dom",
                            "data:text/html,<p id=x>sandboxed</p>"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "<p id=\"x\">sandboxed</p>" in p.stdout, p.stderr[-2000:]

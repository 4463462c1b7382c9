"""How shou starts Chromium: never as root, with Chromium's own sandbox when it works, and all traffic proxied.

As root, Playwright is handed a generated wrapper instead of the browser: it gives the profile directory
Playwright just made to `BROWSER_UID`, points HOME and the XDG folders at a private home, and execs the
browser through `setpriv` as that uid with no groups, no inheritable capabilities and no_new_privs. The
Playwright pipe (fds 3 and 4) survives the exec. `BROWSER_UID` is its own uid, not `nobody`, which the
sandbox backends run code as: code in the sandbox must not signal the browser, read its /proc, or use up
its process limit. Chromium's sandbox (user namespaces) stays on; only if it cannot start here is the
browser started again with `--no-sandbox`, still unprivileged. As any other user there is no wrapper.

The browser gets a small environment (no API keys), and every request it makes goes through the egress
proxy: the launch proxy applies no allow-list, each context gets the proxy of its session's allow-list.
Chromium sends loopback and link-local hosts straight out unless `<-loopback>` is in its bypass list, and
WebRTC would send UDP around the proxy unless its IP handling policy says `disable_non_proxied_udp`.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shlex
import shutil
import tempfile
from typing import Any

from ..errors import ToolError
from .address import Allow
from .egress import egress_proxy

__all__ = ["BROWSER_UID", "NETWORK_ARGS", "browser_env", "launch_chromium", "unprivileged_wrapper"]

BROWSER_UID = 65533  # uid and gid of the browser when shou runs as root; owns nothing on the system
# Chromium as a full browser reads the first, content shell and the old headless shell the second.
NETWORK_ARGS = ("--webrtc-ip-handling-policy=disable_non_proxied_udp",
                "--force-webrtc-ip-handling-policy=disable_non_proxied_udp", "--proxy-bypass-list=<-loopback>")
_ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "FONTCONFIG_FILE",
             "FONTCONFIG_PATH")
_ENV_KEEP_USER = ("HOME", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "DBUS_SESSION_BUS_ADDRESS")
log = logging.getLogger(__name__)
# Whether an executable's own sandbox failed to start once: then it is not tried again in this process.
_sandbox_failed: set[str] = set()


def browser_env(as_root: bool) -> dict[str, str]:
    """The environment the browser gets: locale, display and fonts, never the keys in shou's own."""
    keep = _ENV_KEEP if as_root else _ENV_KEEP + _ENV_KEEP_USER
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


@functools.cache
def _private_dir() -> str:
    """A root-owned folder for the wrapper, with the browser user's home inside; removed at exit."""
    top = tempfile.mkdtemp(prefix="shou-chromium-")
    os.chmod(top, 0o711)  # the browser user may pass through to its home, not list or change the folder
    home = os.path.join(top, "home")
    os.mkdir(home, 0o700)
    for sub in ("tmp", ".config", ".cache"):
        os.mkdir(os.path.join(home, sub), 0o700)
        os.chown(os.path.join(home, sub), BROWSER_UID, BROWSER_UID)
    os.chown(home, BROWSER_UID, BROWSER_UID)
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    return top


@functools.cache
def unprivileged_wrapper(executable: str) -> str:
    """The path of a script that runs `executable` as `BROWSER_UID` with the arguments Playwright gives it."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ToolError("shou runs as root and starts Chromium as an unprivileged user with setpriv, which is "
                        "missing: install util-linux (Debian/Ubuntu: apt-get install util-linux)")
    top = _private_dir()
    home = os.path.join(top, "home")
    uid, q = BROWSER_UID, shlex.quote
    script = f"""#!/bin/sh
# Written by shou: runs Chromium as uid {uid}, never as root. Playwright made the profile folder as root.
for arg do
  case "$arg" in
    --user-data-dir=*) dir=${{arg#--user-data-dir=}}
      if [ -d "$dir" ] && [ ! -L "$dir" ]; then chown -R {uid}:{uid} -- "$dir" || exit 1; fi ;;
  esac
done
export HOME={q(home)} TMPDIR={q(home)}/tmp XDG_CONFIG_HOME={q(home)}/.config XDG_CACHE_HOME={q(home)}/.cache
exec {q(setpriv)} --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all --no-new-privs -- {q(executable)} "$@"
"""
    fd, path = tempfile.mkstemp(prefix="chromium-", dir=top)
    with os.fdopen(fd, "w") as f:
        f.write(script)
    os.chmod(path, 0o700)
    return path


async def launch_chromium(chromium: Any, executable: str | None, *, headless: bool, args: tuple[str, ...]) -> Any:
    """Start a Playwright `Browser` from `chromium` (a `BrowserType`), contained as the module docstring says.

    `executable` is the browser to run (None: Playwright's own build).
    """
    as_root = os.geteuid() == 0
    real = executable or chromium.executable_path
    path = unprivileged_wrapper(real) if as_root else executable
    options: dict[str, Any] = {"executable_path": path, "headless": headless, "env": browser_env(as_root),
                               "args": [*args, *NETWORK_ARGS], "proxy": egress_proxy(Allow()).playwright()}
    if real not in _sandbox_failed:
        try:
            return await chromium.launch(chromium_sandbox=True, **options)
        except Exception as e:
            if "sandboxing failed" not in str(e) and "No usable sandbox" not in str(e):  # Playwright's / Chromium's
                raise
            log.warning("Chromium's sandbox cannot start here (%s); starting it without, as %s",
                        str(e).splitlines()[0], f"uid {BROWSER_UID}" if as_root else "this user")
            _sandbox_failed.add(real)
    return await chromium.launch(chromium_sandbox=False, **options)

#!/usr/bin/env bash
# The package as a user gets it: build the sdist and the wheel (the wheel
# from the sdist, as `python -m build` does), check them with `twine check`,
# then install the wheel (not editable) into fresh venvs in a temporary
# folder outside the checkout and use it there:
#   - with the core only: every public module and name that needs an extra
#     says which one (scripts/check_extra_hints.py), and so does `taskloom demo`;
#     the command it names then installs the extra;
#   - with every extra: `taskloom --help`, `taskloom demo`, and `taskloom serve`
#     serving the console's static files from the installed package.
# Run by .ci/run after the tests; needs the dev extras (build, twine) in
# $PYTHON (default: the checkout's .venv).
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$checkout/.venv/bin/python}"
extras="cli,postgres,web,otel,mcp,a2a,distributed,temporal,prices,testing"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }
fail() { echo "check_wheel: $*" >&2; exit 1; }

step "build the sdist and the wheel"
"$python" -m build --outdir "$work/dist" "$checkout" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; fail "the build failed"; }
sdist="$(ls "$work"/dist/taskloom-*.tar.gz)"
wheel="$(ls "$work"/dist/taskloom-*.whl)"
ls -l "$work/dist" | tail -n +2

step "twine check"
"$python" -m twine check --strict "$sdist" "$wheel"

step "the licence is in both"
"$python" - "$sdist" "$wheel" <<'EOF'
import sys, tarfile, zipfile
sdist, wheel = sys.argv[1:]
in_sdist = [n for n in tarfile.open(sdist).getnames() if n.endswith("/LICENSE")]
in_wheel = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("licenses/LICENSE")]
top = [n for n in in_sdist if n.count("/") == 1]
assert top and in_wheel, (in_sdist, in_wheel)
print(f"sdist: {top[0]} (+{len(in_sdist) - 1} of the test corpora); wheel: {in_wheel[0]}")
EOF

# Everything below runs in the temporary folder, never in the checkout.
cd "$work"
export TASKLOOM_HOME="$work/home"

step "core only: a missing extra is named, with a command that installs it"
python3 -m venv "$work/core"
"$work/core/bin/pip" install -q "$wheel"
"$work/core/bin/python" "$checkout/scripts/check_extra_hints.py"
if "$work/core/bin/taskloom" demo >"$work/demo.out" 2>&1; then
  fail "taskloom demo ran without the cli extra"
fi
cat "$work/demo.out"
grep -q "pip install 'taskloom\[cli\]'" "$work/demo.out" || fail "taskloom demo did not name the cli extra"
"$work/core/bin/pip" install -q 'taskloom[cli]'
"$work/core/bin/taskloom" demo --fast >/dev/null
# Still the wheel installed above (its direct_url.json names the file), not
# a taskloom from the index.
"$work/core/bin/python" - "$wheel" <<'EOF'
import json, pathlib, sys
from importlib.metadata import distribution
origin = json.loads(distribution("taskloom").read_text("direct_url.json") or "{}")
assert origin.get("url") == pathlib.Path(sys.argv[1]).as_uri(), origin
print(f"pip install 'taskloom[cli]' kept {origin['url']} and added the extra")
EOF

step "every extra: the wheel installed, not editable"
python3 -m venv "$work/user"
"$work/user/bin/pip" install -q "$wheel[$extras]"
installed="$("$work/user/bin/python" -c 'import taskloom, pathlib; print(pathlib.Path(taskloom.__file__).parent)')"
case "$installed" in
  "$work/user/"*) echo "taskloom imported from $installed" ;;
  *) fail "taskloom imported from $installed, not the venv" ;;
esac

step "taskloom --help"
"$work/user/bin/taskloom" --help | head -n 5

step "taskloom demo"
"$work/user/bin/taskloom" demo >"$work/demo.out" 2>&1 || { cat "$work/demo.out"; fail "taskloom demo failed"; }
tail -n 5 "$work/demo.out"

step "taskloom serve: the console's pages and static files from the installed package"
# A session for the console to show (only `taskloom run` and code create a store).
"$work/user/bin/python" - <<'EOF'
import asyncio, os
from taskloom import Agent, Runtime
from taskloom.models import ScriptedModel

async def main() -> None:
    store = f"sqlite:///{os.environ['TASKLOOM_HOME']}/taskloom.db"
    async with Runtime(store=store) as runtime:
        agent = Agent(name="wheel-check", model=ScriptedModel(["Hello from the wheel."]))
        session = await runtime.create_session(agent)
        print((await session.run("Hello?")).text)

asyncio.run(main())
EOF
port="$("$work/user/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="check-wheel-$RANDOM$RANDOM"
"$work/user/bin/taskloom" serve --port "$port" --token "$token" >"$work/serve.log" 2>&1 &
server_pid=$!
"$work/user/bin/python" - "$port" "$token" "$installed" <<'EOF'
import http.cookiejar, pathlib, sys, time, urllib.request
port, token, installed = sys.argv[1:]
base = f"http://127.0.0.1:{port}"
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
for _ in range(200):
    try:
        opener.open(f"{base}/?token={token}", timeout=5).read()  # signs in: a cookie
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("the console did not answer in 20 s: " + pathlib.Path("serve.log").read_text())
page = opener.open(f"{base}/", timeout=5).read().decode()
assert "wheel-check" in page, "the sessions page does not list the session"
for name in ("console.css", "console.js"):
    assert f"/static/{name}" in page, f"the page does not load /static/{name}"
    served = opener.open(f"{base}/static/{name}", timeout=5).read()
    assert served == (pathlib.Path(installed) / "console" / "static" / name).read_bytes()
    print(f"/static/{name}: {len(served)} bytes, the installed package's file")
EOF
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""

step "the wheel as a user gets it: all checks passed"

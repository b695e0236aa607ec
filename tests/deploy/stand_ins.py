"""Local stand-ins for the third-party images of ``deploy/compose.yaml`` (``postgres:16``, ``redis:7``,
``motoserver/moto``), which no registry here can give: each is the shared Debian base with Debian's package (or
moto from PyPI) installed, committed with the same interface the compose file relies on — the environment variables
and data path of the official PostgreSQL image, ``redis-server``/``redis-cli``, and ``moto_server`` as entrypoint.
They are made once per engine (kept by tag) in a container on the host's network, as the wheelhouse is."""

from __future__ import annotations

import io
import os
import tarfile
from typing import Any

BASE = "berth-exec-base:offline"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

POSTGRES_ENTRYPOINT = r"""#!/bin/sh
# The official image's contract: POSTGRES_USER, POSTGRES_DB, POSTGRES_PASSWORD_FILE; data in PGDATA.
set -eu
PGDATA=/var/lib/postgresql/data
bin=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  install -o postgres -m 600 "$POSTGRES_PASSWORD_FILE" /tmp/pwfile
  runuser -u postgres -- "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  runuser -u postgres -- createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
  runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c port=5432
"""

REDIS_ENTRYPOINT = r"""#!/bin/sh
# As the official image: reachable from the stack's network without a password (protected mode off).
exec "$@" --bind 0.0.0.0 --protected-mode no
"""

STAND_INS: dict[str, dict[str, Any]] = {
    "POSTGRES_IMAGE": {
        "tag": "berth-stand-in/postgres:15",
        "script": "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends postgresql-15 >/dev/null && rm -rf /var/lib/apt/lists/*"
        # the cluster the package made (on another port: the host's 5432 was taken while it installed)
        " && pg_dropcluster --stop 15 main",
        "files": {"/usr/local/bin/stand-in-postgres": POSTGRES_ENTRYPOINT},
        "changes": ['ENTRYPOINT ["/usr/local/bin/stand-in-postgres"]', "CMD []", "ENV PGPORT=5432"],
    },
    "REDIS_IMAGE": {
        "tag": "berth-stand-in/redis:7",
        "script": "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends redis-server >/dev/null && rm -rf /var/lib/apt/lists/* && mkdir -p /data",
        "files": {"/usr/local/bin/stand-in-redis": REDIS_ENTRYPOINT},
        "changes": ['ENTRYPOINT ["/usr/local/bin/stand-in-redis"]', 'CMD ["redis-server"]', "WORKDIR /data"],
    },
    "S3_IMAGE": {
        "tag": "berth-stand-in/moto:5.2.5",
        "script": "python3 -m venv /opt/moto && /opt/moto/bin/pip install --quiet --disable-pip-version-check "
        "'moto[server]==5.2.5'",
        "files": {},
        "changes": ['ENTRYPOINT ["/opt/moto/bin/moto_server"]', 'CMD ["-H", "0.0.0.0"]'],
    },
}


def _write_files(files: dict[str, str]) -> str:
    lines = []
    for path, text in files.items():
        lines.append(f"cat > {path} <<'STAND_IN_EOF'\n{text}STAND_IN_EOF\nchmod 755 {path}")
    return "\n".join(lines)


def _tar_of(path: str, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(path, arcname=name)
    return buffer.getvalue()


def ensure_stand_ins(engine: Any) -> dict[str, str]:
    """The stand-in images by compose variable (``POSTGRES_IMAGE`` …), made where missing."""
    made: dict[str, str] = {}
    for variable, recipe in STAND_INS.items():
        tag = recipe["tag"]
        made[variable] = tag
        if engine.images.list(name=tag):
            continue
        # the host's CA bundle is copied in for pip and removed before the commit (a bind mount would leave the
        # image a volume declaration)
        script = (
            "set -eu\nexport PIP_CERT=/tmp/berth-ca.crt\n"
            f"{recipe['script']}\n{_write_files(recipe['files'])}\nrm -f /tmp/berth-ca.crt\n"
        )
        container = engine.containers.create(BASE, ["sh", "-c", script], network_mode="host")
        try:
            if os.path.isfile(CA_BUNDLE):
                container.put_archive("/tmp", _tar_of(CA_BUNDLE, "berth-ca.crt"))
            container.start()
            status = container.wait(timeout=900)
            if status["StatusCode"] != 0:
                raise RuntimeError(f"{tag}: {container.logs(tail=40).decode(errors='replace')}")
            repository, _, version = tag.partition(":")
            container.commit(repository=repository, tag=version, changes=recipe["changes"])
        finally:
            container.remove(force=True)
    return made

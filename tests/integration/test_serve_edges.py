"""`shou serve` answers a request it cannot take with a 4xx, never a 500, on both stores: numbers past what a
database integer holds, and a NUL in the address (which PostgreSQL's text cannot even be asked about)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..fixtures.serving import start_serve
from .conftest import shou_env

TOKEN = "edges-token-0123456789"
NUL_ROUTES = [("GET", "/v1/runs/%00"), ("GET", "/v1/runs/%00/events"), ("GET", "/v1/runs/%00/trace"),
              ("POST", "/v1/runs/%00/cancel"), ("POST", "/v1/runs/%00/approvals/c1"),
              ("POST", "/v1/runs/r1/approvals/%00"), ("POST", "/v1/approvals/%00"), ("GET", "/v1/sessions/%00"),
              ("DELETE", "/v1/sessions/%00"), ("GET", "/v1/sessions/a%00b"), ("GET", "/v1/runs?session=%00")]


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres_url")


def test_out_of_range_options_and_nul_addresses_are_4xx(serve, tmp_path: Path, workspace: Path,
                                                         store_spec: str | None) -> None:
    srv = serve([{"text": "fine"}])
    (tmp_path / "tokens").write_text(f"{TOKEN} dana\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    args = ["--tokens", str(tmp_path / "tokens")] + (["--store", store_spec] if store_spec else [])
    s = start_serve(workspace, shou_env(tmp_path, srv), *args)
    try:
        with s.client(TOKEN) as c:
            for options in ({"token_budget": 10**30}, {"token_budget": 2**63}, {"max_steps": 10**30},
                            {"max_cost": 1e400}):
                r = c.post("/v1/runs", json={"task": "hi", "options": options}) if "max_cost" not in options else \
                    c.post("/v1/runs", content=b'{"task": "hi", "options": {"max_cost": 1e400}}',
                           headers={"content-type": "application/json"})
                assert 400 <= r.status_code < 500, (options, r.status_code, r.text)
            for method, path in NUL_ROUTES:
                body = {"allow": True} if "approvals" in path else None
                r = c.request(method, path, json=body)
                assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
            r = c.post("/v1/approvals/c1", json={"allow": True, "run_id": "r\u0000"})
            assert 400 <= r.status_code < 500, r.text
            assert c.get("/healthz").status_code == 200
            assert srv.requests == []
    finally:
        s.stop()
    assert "Traceback" not in s.log(), s.log()

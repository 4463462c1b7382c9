"""How shou connects to PostgreSQL (store/pg_link.py): its settings under the URL's own, and errors that are
clear and never show the URL's password. No server is needed: each case fails before a connection is made."""

from __future__ import annotations

import pytest

from shou.store.pg_link import _unreachable, safe_url


def test_a_store_url_that_is_not_utf8_is_a_clear_error_not_a_traceback() -> None:
    """`shou serve --store postgresql://...` with a byte that is not UTF-8 in argv (a lone surrogate): `_settings`
    turns only psycopg's errors into StoreUnavailable, and conninfo_to_dict's UnicodeEncodeError escapes as a
    traceback."""
    import pytest

    pytest.importorskip("psycopg")
    from shou.store.pg_link import StoreUnavailable, connect

    with pytest.raises(StoreUnavailable):
        connect(b"postgresql://u@127.0.0.1:1/db\xff".decode("utf-8", "surrogateescape"))


def test_a_malformed_store_url_does_not_show_its_password() -> None:
    """`safe_url` drops the password from the URL in the message, but psycopg's own text quotes the token it
    could not parse: a password holding a stray `%` is printed in full (in serve's log, in the CLI's error)."""
    import pytest

    pytest.importorskip("psycopg")
    from shou.store.pg_link import StoreUnavailable, connect

    with pytest.raises(StoreUnavailable) as e:
        connect("postgresql://app:hunter2%zz@db.example/x")
    assert "hunter2" not in str(e.value), str(e.value)


def test_a_urls_own_statement_timeout_wins_however_it_is_spelled() -> None:
    """PostgreSQL's setting names are case-insensitive, and `-c` takes dashes for underscores; `_settings`
    looks for the substring `statement_timeout`, so a URL's `-c STATEMENT_TIMEOUT=0` is followed by shou's
    `-c statement_timeout=30000`, which the server applies last (the URL's setting loses), while a search_path
    that merely names `statement_timeout` drops shou's timeout altogether."""
    import pytest

    pytest.importorskip("psycopg")
    from shou.store.pg_link import _settings

    own = _settings("postgresql://u@h/db?options=-c%20STATEMENT_TIMEOUT%3D0", {})
    assert "30000" not in own.get("options", ""), own
    other = _settings("postgresql://u@h/db?options=-c%20search_path%3Dstatement_timeout_log", {})
    assert "statement_timeout=30000" in other.get("options", ""), other


@pytest.mark.parametrize("url", ["postgresql://u@127.0.0.1:1/db?password=s3cretQ",
                                 "postgresql://u@[::1:1/db?password=s3cretQ"], ids=["refused", "malformed"])
def test_a_password_given_as_a_url_parameter_is_not_shown(url: str) -> None:
    # _unreachable scrubs the password of the URL's user part only; libpq takes `?password=` as well, and both
    # safe_url and psycopg's own text (which quotes a URL it cannot read) show it (pg_link.py:_password, safe_url).
    pytest.importorskip("psycopg")
    from shou.store.pg_link import StoreUnavailable, connect

    with pytest.raises(StoreUnavailable) as e:
        connect(url)
    assert "s3cretQ" not in str(e.value), str(e.value)


@pytest.mark.parametrize("url", ["postgresql://u@h/db?pass%77ord=s3cret",
                                 "postgresql://u@h/db?%70assword=s3cret&sslmode=require"])
def test_a_password_parameter_with_a_percent_encoded_name_is_never_shown(url: str) -> None:
    # libpq decodes a URI query parameter's name as it does its value: "pass%77ord" is "password" to it
    # (psycopg's conninfo_to_dict gives {'password': 's3cret'}), but the regex looks for "password" as written.
    pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(url)["password"] == "s3cret"
    assert "s3cret" not in safe_url(url)


def test_a_bad_percent_escape_in_a_percent_encoded_password_parameter_is_not_quoted() -> None:
    # libpq's error quotes the token it could not decode: the password itself.
    pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    url = "postgresql://u@h/db?pass%77ord=s3%zzcret"
    with pytest.raises(Exception) as e:
        conninfo_to_dict(url)
    assert "s3%zzcret" not in str(_unreachable(url, e.value))


@pytest.mark.parametrize("url", ["postgresql://u@h/db?sslpassword=k3ysecret", "host=h sslpassword=k3ysecret"])
def test_the_client_keys_password_is_never_shown(url: str) -> None:
    # sslpassword is the passphrase of the client's private key: as secret as the password, shown as written.
    assert "k3ysecret" not in safe_url(url)

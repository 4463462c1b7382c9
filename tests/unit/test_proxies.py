"""Which proxy a model request goes through: the environment's settings as curl and httpx read them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.errors import ModelError
from shou.models.proxies import Proxy, proxy_for

P = "http://proxy.test:3128"


@pytest.mark.parametrize(("no_proxy", "url", "bypassed"), [
    ("localhost:8000", "http://localhost:8000/v1", True),
    ("localhost:8000", "http://localhost:9000/v1", False),  # another port of the same host
    ("*.internal", "http://vllm.internal/v1", True),
    (".internal", "http://a.b.internal/v1", True),
    ("internal", "http://vllm.internal/v1", True),  # a name covers its subdomains
    ("internal", "http://notinternal/v1", False),  # ... but not a longer name that ends the same way
    ("internal.example,*", "http://localhost/v1", True),
    ("*", "https://api.openai.com/v1", True),
    ("127.0.0.0/8", "http://127.0.0.1:8000/v1", True),
    ("10.0.0.0/8", "http://127.0.0.1/v1", False),
    ("10.1.2.3", "http://10.1.2.3/v1", True),
    ("::1", "http://[::1]:8000/v1", True),
    ("[::1]:8000", "http://[::1]:8000/v1", True),
    ("fd00::/8", "http://[fd12::5]/v1", True),
    ("API.Example.COM", "https://api.example.com/v1", True),  # names are not case-sensitive
    ("example.com:443", "https://api.example.com/v1", True),  # the scheme's default port counts
    (" , ,", "http://localhost/v1", False),
    ("http://vllm.internal", "http://vllm.internal/v1", True),
])
def test_no_proxy_exempts_what_curl_and_httpx_exempt(no_proxy: str, url: str, bypassed: bool) -> None:
    got = proxy_for(url, {"HTTP_PROXY": P, "HTTPS_PROXY": P, "NO_PROXY": no_proxy})
    assert (got is None) is bypassed


def test_the_target_scheme_picks_the_proxy_then_all_proxy() -> None:
    env = {"HTTPS_PROXY": "http://tls.test:1", "ALL_PROXY": "http://all.test:2"}
    assert proxy_for("https://api.test/v1", env) == Proxy("http://tls.test:1")
    assert proxy_for("http://api.test/v1", env) == Proxy("http://all.test:2")
    assert proxy_for("http://api.test/v1", {}) is None


def test_lower_case_wins_and_an_empty_lower_case_setting_unsets() -> None:
    assert proxy_for("http://x/v1", {"HTTP_PROXY": "http://upper:1", "http_proxy": "http://lower:2"}) == \
        Proxy("http://lower:2")
    assert proxy_for("http://x/v1", {"HTTP_PROXY": "http://upper:1", "http_proxy": ""}) is None


def test_under_cgi_http_proxy_is_a_client_header_not_a_setting() -> None:
    assert proxy_for("http://x/v1", {"HTTP_PROXY": "http://evil:1", "REQUEST_METHOD": "POST"}) is None


def test_a_proxy_without_a_scheme_is_an_http_proxy_and_https_proxies_are_kept() -> None:
    assert proxy_for("http://x/v1", {"HTTP_PROXY": "127.0.0.1:3128"}) == Proxy("http://127.0.0.1:3128")
    assert proxy_for("https://x/v1", {"HTTPS_PROXY": "https://p.test:443"}) == Proxy("https://p.test:443")


def test_credentials_in_the_proxy_url_become_its_login_and_leave_the_url() -> None:
    got = proxy_for("https://x/v1", {"HTTPS_PROXY": "http://us%3Aer:p%40ss@p.test:8080"})
    assert got is not None and got.url == "http://p.test:8080"
    assert got.headers == {"Proxy-Authorization": "Basic dXM6ZXI6cEBzcw=="}  # base64 of "us:er:p@ss"


@pytest.mark.parametrize("value", ["socks6://user:pw@127.0.0.1:1080", "ftp://user:pw@p.test", "http://",
                                   "http://user:pw@p.test:99999", "http://me:pa#ss-pw@proxy.corp:3128"])
def test_a_proxy_that_cannot_be_used_is_an_error_naming_it_never_a_silent_bypass(value: str) -> None:
    with pytest.raises(ModelError, match="proxy") as e:
        proxy_for("https://api.test/v1", {"ALL_PROXY": value})
    assert not e.value.retryable
    assert "pw" not in str(e.value)  # credentials in it are masked


@given(st.dictionaries(st.sampled_from(["HTTP_PROXY", "https_proxy", "ALL_PROXY", "NO_PROXY", "no_proxy"]),
                       st.text(max_size=40)),
       st.sampled_from(["http://localhost:8000/v1", "https://api.test/v1", "http://[::1]/v1", "http://10.0.0.1/v1"]))
def test_any_settings_give_a_proxy_none_or_a_model_error(env: dict[str, str], url: str) -> None:
    try:
        got = proxy_for(url, env)
    except ModelError:
        return
    assert got is None or got.url.startswith(("http://", "https://"))


@pytest.mark.parametrize("entry", ["localhost:\u00b2", "localhost:abc", "[::1]:x"])
def test_a_no_proxy_port_that_is_not_a_number_matches_nothing_and_raises_nothing(entry: str) -> None:
    assert proxy_for("http://localhost:8000/v1", {"HTTP_PROXY": P, "NO_PROXY": entry}) == Proxy(P)


def test_socks_proxies_are_read_with_their_login_and_name_lookup() -> None:
    got = proxy_for("https://x/v1", {"ALL_PROXY": "socks5h://me:p%40ss@127.0.0.1:1080"})
    assert got == Proxy("socks5://127.0.0.1:1080", login=("me", "p@ss"), remote_dns=True) and got.socks
    assert proxy_for("http://x/v1", {"ALL_PROXY": "socks4://p.test"}) == Proxy("socks4://p.test:1080")

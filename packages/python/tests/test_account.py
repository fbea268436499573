"""Account and keys against a real nube: typed answers, keys that work and stop working, error classes."""
import pytest

from nube import AuthenticationError, Nube, NotFoundError, ValidationError


def test_account_get_returns_the_owner_on_plan_tera(nube: Nube) -> None:
    account = nube.account.get()
    assert account["plan"]["name"] == "tera"
    same = nube.call("account.get")
    assert same["id"] == account["id"]
    usage = nube.account.usage()
    assert isinstance(usage, dict)


def test_a_wrong_key_raises_authentication_error_that_says_what_to_check(live: dict) -> None:
    bad = Nube(api_key="nube_sk_live_" + "x" * 40, base_url=live["baseUrl"])
    with pytest.raises(AuthenticationError) as info:
        bad.account.get()
    e = info.value
    assert e.status == 401
    assert "NUBE_API_KEY" in str(e)
    assert e.request_id
    assert e.operation_id == "account.get"


def test_creates_a_key_uses_it_revokes_it_and_the_revoked_key_fails(nube: Nube, live: dict) -> None:
    created = nube.account.keys.create(name="python-sdk")
    assert created["secret"].startswith("nube_sk_live_")
    second = Nube(api_key=created["secret"], base_url=live["baseUrl"])
    assert second.account.get()["plan"]["name"] == "tera"
    assert created["id"] in [k["id"] for k in nube.account.keys.list()["items"]]
    assert nube.account.keys.revoke(created["id"]) == {"ok": True}
    with pytest.raises(AuthenticationError):
        second.account.get()
    with pytest.raises(NotFoundError) as info:
        nube.call("account.keys.revoke", params={"keyId": created["id"]})
    assert "Check the id" in str(info.value)
    assert info.value.status == 404


def test_a_validation_error_carries_the_issues_and_lists_them(nube: Nube) -> None:
    with pytest.raises(ValidationError) as info:
        nube.account.keys.create(name="")
    e = info.value
    assert e.status == 400
    assert e.issues
    assert any("name" in i["path"] for i in e.issues)
    assert "name" in str(e)


def test_environment_variables_configure_the_client(live: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUBE_API_KEY", live["apiKey"])
    monkeypatch.setenv("NUBE_BASE_URL", live["baseUrl"])
    assert Nube().account.get()["plan"]["name"] == "tera"


def test_unknown_operation_and_missing_path_param_are_type_errors(nube: Nube) -> None:
    with pytest.raises(TypeError, match="unknown nube operation"):
        nube.call("account.nope")
    with pytest.raises(TypeError, match='path parameter "keyId" is required'):
        nube.call("account.keys.revoke", params={})

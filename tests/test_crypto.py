"""The envelope and the keyring: sealing, binding, refusals, and keys kept out of every text."""

from __future__ import annotations

import base64
import os

import orjson
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from durability.cli import cli
from durability.crypto import Keyring, Sealed, is_sealed, key_id_of, new_key_line
from durability.crypto.envelope import Sealer, hkdf_sha256
from durability.errors import ConfigError, DecryptionFailed, KeyMissing
from durability.testing.suite import write_for

K1, K2 = os.urandom(32), os.urandom(32)
ROW = ("thread-1", "ns", "cp-1", "state")
TEXT = orjson.dumps({"messages": [{"content": "secret words " * 30, "i": i} for i in range(5)]})


def line(key_id: str, key: bytes) -> str:
    return f"{key_id}:{base64.b64encode(key).decode()}"


def test_hkdf_matches_the_reference_implementation() -> None:
    """The two-HMAC HKDF equals cryptography's RFC 5869 HKDF."""
    salt, info = os.urandom(16), b"durability/thread-key/1\x00t"
    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(K1)
    assert hkdf_sha256(K1, salt, info) == expected


def test_seal_then_open_round_trips_and_names_key_scheme_version() -> None:
    """A sealed text opens to the same text; its envelope names the key id, scheme and version
    and holds no readable plaintext (it was compressed, then encrypted)."""
    sealer = Sealer(Keyring({"k1": K1}))
    envelope = sealer.seal(TEXT.decode(), *ROW)
    assert is_sealed(envelope)
    assert key_id_of(envelope) == "k1"
    parsed = orjson.loads(envelope)
    assert (parsed["v"], parsed["s"], parsed["k"], parsed["x"]) == (
        1,
        "A256GCM-HKDF-SHA256",
        "k1",
        "deflate",
    )
    assert "secret" not in envelope
    assert len(envelope) < len(TEXT)
    assert sealer.open(envelope, *ROW) == TEXT.decode()
    assert Sealer(Keyring({"k1": K1})).open(envelope, *ROW) == TEXT.decode(), "another process"


@pytest.mark.parametrize(
    "moved",
    [
        ("thread-2", "ns", "cp-1", "state"),
        ("thread-1", "", "cp-1", "state"),
        ("thread-1", "ns", "cp-2", "state"),
        ("thread-1", "ns", "cp-1", "w"),
    ],
)
def test_a_ciphertext_moved_to_another_row_or_field_does_not_open(moved: tuple[str, ...]) -> None:
    """The row's identity is the associated data: any other thread, namespace, id or field fails,
    and the refusal names the row it was read as."""
    sealer = Sealer(Keyring({"k1": K1}))
    envelope = sealer.seal("{}", *ROW)
    with pytest.raises(DecryptionFailed, match="does not authenticate") as info:
        sealer.open(envelope, *moved)
    assert repr(moved[2]) in str(info.value)


def test_tampered_wrong_key_and_missing_key_refusals() -> None:
    """A flipped byte or a header edit fails naming the row; a key with the right id but other
    bytes fails; an unknown key id fails naming the key id and the thread, never a key."""
    envelope = Sealer(Keyring({"k1": K1})).seal("{}", *ROW)
    parsed = orjson.loads(envelope)
    raw = bytearray(base64.b64decode(parsed["c"]))
    raw[0] ^= 1
    tampered = orjson.dumps({**parsed, "c": base64.b64encode(bytes(raw)).decode()}).decode()
    with pytest.raises(DecryptionFailed, match="'cp-1'"):
        Sealer(Keyring({"k1": K1})).open(tampered, *ROW)
    with pytest.raises(DecryptionFailed):
        Sealer(Keyring({"k1": K2})).open(envelope, *ROW)
    with pytest.raises(DecryptionFailed, match="damaged"):
        Sealer(Keyring({"k1": K1})).open(envelope[:-5], *ROW)
    with pytest.raises(KeyMissing) as info:
        Sealer(Keyring({"k2": K2})).open(envelope, *ROW)
    message = str(info.value)
    assert "'k1'" in message
    assert "'thread-1'" in message
    assert "DURABILITY_ENCRYPTION_KEYS" in message
    for key in (K1, K2):
        assert base64.b64encode(key).decode() not in message


def test_rotation_seals_under_the_current_key_and_opens_older_ones() -> None:
    """A new key put first seals new writes; rows under the older key still open."""
    old = Sealer(Keyring({"k1": K1})).seal("[1]", *ROW)
    rotated = Sealer(Keyring.parse(f"{line('k2', K2)},{line('k1', K1)}"))
    assert key_id_of(rotated.seal("[2]", *ROW)) == "k2"
    assert rotated.open(old, *ROW) == "[1]"


def test_keyring_sources_and_refusals_never_show_a_key(tmp_path, monkeypatch) -> None:
    """The variable, a file and a KMS callable all give keys; bad entries are refused by
    position and id; no repr or message holds a key."""
    secret = base64.b64encode(K1).decode()
    ring = Keyring.from_env({"DURABILITY_ENCRYPTION_KEYS": f"{line('a', K1)}, {line('b', K2)}"})
    assert ring is not None
    assert ring.ids == ["a", "b"]
    assert ring.key("b") == K2
    assert secret not in repr(ring)
    assert secret not in repr(Sealer(ring))
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026\n{line('b', K2)}\n{line('a', K1)}\n")
    assert Keyring.from_env({"DURABILITY_ENCRYPTION_KEYS_FILE": str(path)}).current == "b"  # type: ignore[union-attr]
    assert Keyring.from_env({}) is None
    asked: list[str] = []
    kms = Keyring(
        current="kms-1", fetch=lambda k: asked.append(k) or (K1 if k == "kms-1" else None)
    )
    assert kms.key("kms-1") == K1
    assert kms.key("nope") is None
    assert asked == ["kms-1", "nope"]
    for bad, needle in [
        (f"a:{secret[:-4]}", "32 bytes"),
        ("a:!!!", "not base64"),
        ("nocolon", "keyid:BASE64KEY"),
        (f"a b:{secret}", "key id"),
        (f"{line('a', K1)},{line('a', K2)}", "repeats"),
    ]:
        with pytest.raises(ConfigError, match=needle) as info:
            Keyring.parse(bad)
        assert secret not in str(info.value)


def test_sealed_value_repr_names_key_and_size_only() -> None:
    """A payload kept sealed says which key it needs, and nothing of its content."""
    envelope = Sealer(Keyring({"k1": K1})).seal(TEXT.decode(), *ROW)
    assert repr(Sealed(envelope)) == f"<Sealed payload under key 'k1', {len(envelope)} bytes>"


def test_keys_new_prints_a_usable_line() -> None:
    """`durability keys new` prints keyid:BASE64KEY on stdout that a keyring accepts."""
    result = CliRunner().invoke(cli, ["keys", "new", "--id", "prod-2026"])
    assert result.exit_code == 0, result.output
    printed = result.stdout.strip().splitlines()[0]
    assert printed.startswith("prod-2026:")
    assert Keyring.parse(printed).current == "prod-2026"
    assert new_key_line() != new_key_line()


def test_store_reencrypt_cli_plans_then_applies_without_showing_keys(tmp_path, monkeypatch) -> None:
    """`durability store reencrypt --dry-run --json` counts rows per key id and changes nothing;
    with --yes it re-seals them under the current key; no output holds a key."""
    import durability
    from durability.model import Checkpoint

    url = f"sqlite:///{tmp_path / 'rotate.db'}"
    with durability.open(url, keyring=Keyring({"k1": K1})) as store:
        for n in range(4):
            store.put(Checkpoint(thread_id=f"t{n % 2}", state={"n": n}))
    monkeypatch.setenv("DURABILITY_ENCRYPTION_KEYS", f"{line('k2', K2)},{line('k1', K1)}")
    runner = CliRunner()
    dry = runner.invoke(cli, ["store", "reencrypt", url, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    plan = orjson.loads(dry.stdout)["plan"]
    assert [(k["key_id"], k["rows"]) for k in plan["by_key"]] == [("k1", 4)]
    assert plan["rows_to_change"] == 4
    done = runner.invoke(cli, ["store", "reencrypt", url, "--yes", "--json"])
    assert done.exit_code == 0, done.output
    assert orjson.loads(done.stdout)["rows"] == 4
    again = runner.invoke(cli, ["store", "reencrypt", url, "--dry-run", "--json"])
    assert orjson.loads(again.stdout)["plan"]["rows_to_change"] == 0
    for out in (dry.output, done.output, again.output):
        assert base64.b64encode(K1).decode() not in out
        assert base64.b64encode(K2).decode() not in out
    with durability.open(url, keyring=Keyring({"k2": K2})) as store:
        assert sorted(c.state["n"] for t in ("t0", "t1") for c in store.history(t)) == [0, 1, 2, 3]


def test_coverage_view_frames_chart_and_cli(tmp_path, monkeypatch) -> None:
    """The encryption view counts rows per key id with its status, the frames gain `encrypted`
    and `key_id`, the chart draws, and `durability store encryption --json` says the same,
    all without a key (a keyless handle reads the headers)."""
    import durability
    from durability import frames, plots
    from durability.model import Checkpoint

    url = f"sqlite:///{tmp_path / 'cover.db'}"
    with durability.open(url, keyring=Keyring({"k1": K1})) as store:
        store.put(Checkpoint(thread_id="a", state={"n": 1}))
        store.put(Checkpoint(thread_id="b", state={"n": 2}))
    with durability.open(url) as keyless:
        keyless.put(Checkpoint(thread_id="b", state={"n": 3}))
    with durability.open(url, keyring=Keyring({"k2": K2, "k1": K1})) as store:
        view = frames.encryption(store)
        assert list(view.columns) == list(frames.COLUMNS["encryption"])
        assert [
            (k, s, n)
            for k, s, n in zip(
                view["key_id"].fillna("-"), view["status"], view["rows"], strict=True
            )
        ] == [
            ("k1", "older", 2),
            ("-", "clear", 1),
        ]
        assert round(view.attrs["percent_encrypted"], 1) == 66.7
        cps = frames.checkpoints(store, encryption=True)
        assert cps["encrypted"].tolist() == [True, True, False]
        assert cps["key_id"].tolist()[:2] == ["k1", "k1"]
        threads = frames.threads(store, encryption=True).set_index("thread_id")
        assert threads.loc["a", "encrypted"]
        assert not threads.loc["b", "encrypted"]
        assert threads.loc["a", "key_id"] == "k1"
        figure = plots.encryption(view)
        assert "66.7 % of rows encrypted" in figure.texts[0].get_text()
    monkeypatch.setenv("DURABILITY_ENCRYPTION_KEYS", f"{line('k1', K1)}")
    result = CliRunner().invoke(cli, ["store", "encryption", url, "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert (data["rows"], data["encrypted_rows"], data["clear_rows"]) == (3, 2, 1)
    assert data["by_key"][0] == {
        "key_id": "k1",
        "status": "current",
        "rows": 2,
        "bytes": data["by_key"][0]["bytes"],
    }
    assert base64.b64encode(K1).decode() not in result.output


def test_encryption_cli_estimates_from_a_sample(tmp_path) -> None:
    """`durability store encryption --sample N` reads about N envelopes, scales the counts to
    the store's rows and says it is an estimate; without it every row is read."""
    import durability
    from durability.model import Checkpoint

    url = f"sqlite:///{tmp_path / 'sampled.db'}"
    with durability.open(url, keyring=Keyring({"k1": K1})) as store:
        for n in range(40):
            store.put(Checkpoint(thread_id=f"t{n % 8}", state={"n": n}))
    runner = CliRunner()
    sampled = runner.invoke(cli, ["store", "encryption", url, "--sample", "10", "--json"])
    assert sampled.exit_code == 0, sampled.output
    data = orjson.loads(sampled.stdout)
    assert 0 < data["sampled"] < 40
    assert (data["rows"], data["encrypted_rows"]) == (40, 40), "scaled to every row"
    whole = orjson.loads(runner.invoke(cli, ["store", "encryption", url, "--json"]).stdout)
    assert whole["sampled"] is None
    text = runner.invoke(cli, ["store", "encryption", url, "--sample", "10"]).output
    assert f"(estimated from {data['sampled']} rows)" in text
    refused = runner.invoke(cli, ["store", "encryption", url, "--sample", "0"])
    assert refused.exit_code == 2
    assert "--sample" in refused.output


def test_copy_reseals_what_it_moves(tmp_path) -> None:
    """A copy under another thread id re-seals the state and pending writes for the new thread
    (the associated data binds it), and a clear store copied into one that encrypts is sealed."""
    import durability
    from durability.crypto import is_sealed
    from durability.model import Checkpoint
    from durability.stores.rows import Select

    ring = Keyring({"k1": K1})
    src = durability.open(f"sqlite:///{tmp_path / 'src.db'}", keyring=ring)
    cp = src.put(Checkpoint(thread_id="a", state={"secret": 1}))
    src.put_writes([write_for(cp, 7)])
    dst = durability.open("memory://crypt-copy-dst", keyring=ring)
    durability.copy(src, dst, rename="{thread_id}-copy")
    latest = dst.latest("a-copy")
    assert latest is not None
    assert latest.state == {"secret": 1}
    assert dst.writes("a-copy", cp.checkpoint_id)[0].value == 7
    clear = durability.open("memory://crypt-copy-clear")
    clear.put(Checkpoint(thread_id="b", state={"public": 2}))
    durability.copy(clear, dst)
    assert is_sealed(dst._select(Select("b"))[0].state)  # type: ignore[attr-defined]
    latest = dst.latest("b")
    assert latest is not None
    assert latest.state == {"public": 2}

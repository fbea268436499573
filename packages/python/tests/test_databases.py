"""Databases against a real nube: create, statements with arguments, batches, export, delete."""
from nube import NotFoundError, Nube, ValidationError
import pytest


def test_create_query_with_args_batch_and_delete(nube: Nube) -> None:
    db = nube.databases.create(name="py-notes")
    assert db["id"]
    nube.databases.query(db["id"], sql="CREATE TABLE n (t TEXT, k INTEGER)")
    nube.databases.query(db["id"], sql="INSERT INTO n VALUES (?, ?)", args=["hola", 1])
    nube.databases.query(db["id"], sql="INSERT INTO n VALUES (:t, :k)", args={"t": "adiós", "k": 2})
    q = nube.databases.query(db["id"], sql="SELECT t, k FROM n ORDER BY k")
    assert q["columns"] == ["t", "k"]  # type: ignore[typeddict-item]
    assert q["rows"] == [["hola", 1], ["adiós", 2]]  # type: ignore[typeddict-item]
    batch = nube.databases.query(db["id"], statements=[{"sql": "DELETE FROM n WHERE k = 1"}, {"sql": "SELECT count(*) AS c FROM n"}])
    assert batch["results"][1]["rows"] == [[1]]  # type: ignore[typeddict-item]
    with pytest.raises(ValidationError):
        nube.databases.query(db["id"])
    exported = nube.databases.export(db["id"]).read()
    assert exported.startswith(b"SQLite format 3\x00")
    assert nube.databases.delete(db["id"]) == {"ok": True}
    with pytest.raises(NotFoundError):
        nube.databases.get(db["id"])

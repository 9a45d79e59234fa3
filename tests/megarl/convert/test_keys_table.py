from megarl.convert import keys_table


def test_the_documents_tables_are_the_ones_the_hints_and_converter_read():
    """docs/verl-keys.md holds the tables generated from megarl/config/verl_keys.py, as they are now."""
    assert keys_table.markdown() in keys_table.DOC.read_text(), (
        "docs/verl-keys.md is out of date: run python -m megarl.convert.keys_table")


def test_update_rewrites_only_the_generated_block(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# before\n{keys_table.BEGIN}\n| stale |\n{keys_table.END}\nafter\n")
    assert keys_table.update(doc)
    assert doc.read_text() == f"# before\n{keys_table.markdown()}\nafter\n"
    assert not keys_table.update(doc)

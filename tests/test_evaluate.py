"""`nanospec eval` refuses a model it cannot judge in one sentence, before loading anything.

(The accuracies themselves are measured on the shipped checkpoints in test_shipped.py; the
table's layout is in test_tables.py.)
"""

import pytest

from nanospec.cli import main


@pytest.mark.parametrize("models", ["foo", "target,foo", "medusa", ",", ""])
def test_an_unknown_model_is_one_sentence_naming_the_allowed_ones(capsys, tmp_path, models):
    # The folder does not exist: had eval loaded anything first, it would say "not found".
    code = main(["--checkpoints", str(tmp_path / "no-such-folder"), "eval", "--models", models])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanospec: error: --models takes target, draft")
    assert "retrain" not in err and "Traceback" not in err

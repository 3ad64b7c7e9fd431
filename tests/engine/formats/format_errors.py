"""One check for every model-file reader: opening a broken file raises ModelFormatError
whose message names the file and says what is wrong."""
from __future__ import annotations

import pytest

from engine.errors import ModelFormatError


def expect_format_error(open_file, path, *fragments: str) -> str:
    """`open_file(path)` must raise ModelFormatError naming `path` and every fragment."""
    with pytest.raises(ModelFormatError) as info:
        open_file(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message

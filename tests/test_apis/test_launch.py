"""mmdcs.apis.launch: what the tools share to start (their one-line input errors)."""
import pytest

from mmdcs.apis.launch import user_errors
from mmdcs.peers.ofb.arch import ArchFileError
from mmdcs.selection import SubnetError


def test_user_errors_turns_input_file_errors_into_one_line(capsys):
    for exc in (SubnetError('subnet.json: 3 blocks for 12'), ArchFileError('arch.json: bad')):
        with pytest.raises(SystemExit) as e:
            with user_errors():
                raise exc
        assert e.value.code == 2
        assert capsys.readouterr().err == f'error: {exc}\n'
    with pytest.raises(ValueError, match='not an input file'):  # other errors pass through
        with user_errors():
            raise ValueError('not an input file')

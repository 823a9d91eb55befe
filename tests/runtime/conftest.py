"""One temporary compile cache for the whole session: each distinct program compiles once."""
import pytest


@pytest.fixture(scope="session", autouse=True)
def kiln_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("kiln-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TENSORKILN_CACHE", str(path))
        yield path

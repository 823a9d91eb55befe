"""A temporary compile cache for the modules that build programs (`pytestmark = usefixtures("kiln_cache")`)."""
import pytest


@pytest.fixture(scope="module")
def kiln_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TENSORKILN_CACHE", str(tmp_path_factory.mktemp("kiln-cache")))
        yield

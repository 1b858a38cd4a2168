# contrast for test_adv36_unionlimits: a plain save of the union is refused (UnsupportedDataError)
FLYTE_CHECKPOINT_MAX_MEMBERS=10 python -c "
import tempfile, pathlib, flyte_checkpoint as fc
b=pathlib.Path(tempfile.mkdtemp()); d=b/'u'; d.mkdir()
for i in range(14): (d/f'f{i}').write_bytes(b'x')
with fc.Checkpoint(str(b/'c')) as cp: cp.save_sync(d)
"

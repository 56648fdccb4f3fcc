"""Runs an example training script (argv[1], its options after it) as it is, except that rank
1 exits at the end of epoch FAIL_EPOCH on attempt 1 only: right after the checkpoint helpers
ran for that epoch (torch: `save_checkpoint`; MindSpore: `CheckpointCallback`'s epoch end), as
a device fault would stop it."""
import os
import runpy
import sys

script = os.path.abspath(sys.argv[1])
fail_epoch = int(os.environ["FAIL_EPOCH"])
first_attempt = os.environ.get("PLATFORM_ATTEMPT_NUMBER") == "1"


def exit_if_due(rank, epoch):
    if first_attempt and rank == 1 and epoch == fail_epoch:
        print("fail_once: rank 1 exits at the end of epoch %d" % epoch, flush=True)
        os._exit(3)


if "torch" in os.path.basename(script):
    import platform_plugin.checkpoint.torch as helpers

    save = helpers.save_checkpoint

    def save_then_maybe_exit(state, step, epoch=None, keep=2):
        folder = save(state, step, epoch, keep)
        exit_if_due(helpers.rank(), epoch)
        return folder

    helpers.save_checkpoint = save_then_maybe_exit
else:
    import platform_plugin.checkpoint.mindspore as helpers

    epoch_end = helpers.CheckpointCallback.on_train_epoch_end

    def epoch_end_then_maybe_exit(self, run_context):
        epoch_end(self, run_context)
        exit_if_due(helpers.rank(), int(run_context.original_args().cur_epoch_num))

    helpers.CheckpointCallback.on_train_epoch_end = epoch_end_then_maybe_exit

sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))  # the script imports digits_common beside it
runpy.run_path(script, run_name="__main__")

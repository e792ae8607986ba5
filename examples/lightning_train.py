"""Train with PyTorch Lightning on a longshore feed (clients/python/README.md,
"Lightning and Accelerate").

The loader is what Lightning expects of a training dataloader: an iterable
that yields one epoch per `iter()`, sized (`len(loader)`: the rank's steps
per epoch, which `trainer.estimated_stepping_batches` and the progress bar
use), whose batches move with `batch.to(device, non_blocking=...)`. The
data module's `state_dict()` is the loader's, which commits at the node,
so the checkpoint Lightning writes resumes the feed where the model is.

    longshore-node --standalone --dataset DIR --sink feed --epochs 10 &
    torchrun --nproc-per-node 2 examples/lightning_train.py --epochs 10

Lightning is not installed where this project is tested (Debian has no
package for it): there `--no-lightning` runs the same module and data
module in a plain PyTorch loop that does with them what Lightning's fit
loop does (clients/python/tests/test_dataloader.py runs it).
"""

import argparse
import os

import torch
import torch.nn.functional as F

import longshore

try:
    import lightning as L
except ImportError:  # plain PyTorch only (--no-lightning)
    L = None


class Classifier(torch.nn.Module):
    """A small convolutional classifier with Lightning's hooks."""

    def __init__(self, num_classes: int, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: longshore.TorchBatch, batch_idx: int) -> torch.Tensor:
        # batch is what Lightning's device transfer made of a longshore.Batch:
        # batch.to(device) -> TorchBatch (uint8 NCHW images, int64 labels)
        x = batch.images.float().div_(255)
        # valid is False at rows filled in failed samples' places (the
        # batch keeps its shape): leave them out of the loss.
        valid = batch.valid.to(x.dtype)
        loss = (F.cross_entropy(self(x), batch.labels, reduction="none") * valid).sum() / valid.sum().clamp(min=1)
        if L is not None and isinstance(self, L.LightningModule):
            self.log("loss", loss, batch_size=len(batch), prog_bar=True)
        return loss

    def optimizers_for(self, total_steps: int):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=total_steps)
        return opt, sched


class FeedData:
    """The feed as a data module: the loader of this process's rank
    ($LOCAL_RANK, else $SLURM_LOCALID), waiting for its node if it is still
    starting."""

    def __init__(self, **loader_kw) -> None:
        super().__init__()
        self.loader = longshore.Loader(**loader_kw)

    def train_dataloader(self) -> longshore.Loader:
        return self.loader

    def state_dict(self) -> dict:
        return self.loader.state_dict()  # commits the last batch handed out at the node

    def load_state_dict(self, sd: dict) -> None:
        self.loader.load_state_dict(sd)  # the node resumes after that commit


if L is not None:

    class LitClassifier(Classifier, L.LightningModule):
        def configure_optimizers(self):
            # estimated_stepping_batches = len(loader) * max_epochs
            opt, sched = self.optimizers_for(int(self.trainer.estimated_stepping_batches))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class FeedDataModule(FeedData, L.LightningDataModule):
        pass


def lightning_main(args) -> None:
    dm = FeedDataModule(connect_timeout=args.connect_timeout)
    model = LitClassifier(args.num_classes, args.lr)
    trainer = L.Trainer(max_epochs=args.epochs, default_root_dir=os.path.dirname(os.path.abspath(args.ckpt)))
    trainer.fit(model, datamodule=dm, ckpt_path="last" if args.resume else None)


def plain_main(args) -> None:
    """What Lightning's fit loop does with the module and data module."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dm = FeedData(connect_timeout=args.connect_timeout)
    model = Classifier(args.num_classes, args.lr).to(device)
    loader = dm.train_dataloader()
    print(f"steps per epoch: {len(loader)}", flush=True)
    opt, sched = model.optimizers_for(len(loader) * args.epochs)
    first = 0
    if args.resume and os.path.exists(args.ckpt):
        ck = torch.load(args.ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        dm.load_state_dict(ck["datamodule"])
        first = ck["epoch"] + 1
    loss = torch.zeros(())
    for epoch in range(first, args.epochs):
        n = 0
        for i, batch in enumerate(loader):
            batch = batch.to(device, non_blocking=True)  # Lightning's batch_to_device
            loss = model.training_step(batch, i)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            batch.release()
            n += 1
        print(f"epoch {epoch}: {n} steps", flush=True)
        # ModelCheckpoint at the epoch's end: the model, the optimizer and
        # the data module's state (a commit at the node) in one file
        os.makedirs(os.path.dirname(os.path.abspath(args.ckpt)), exist_ok=True)
        tmp = args.ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "datamodule": dm.state_dict(), "epoch": epoch}, tmp)
        os.replace(tmp, args.ckpt)
    loader.close()
    print(f"loss {loss.item():.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1, help="epochs (the node's --epochs)")
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ckpt", default="lightning_ckpt/last.pt", help="checkpoint file (plain loop)")
    ap.add_argument("--resume", action="store_true", help="resume from the last checkpoint")
    ap.add_argument("--connect-timeout", type=float, default=None,
                    help="seconds to wait for the node (default $LONGSHORE_CONNECT_TIMEOUT, else 60)")
    ap.add_argument("--no-lightning", action="store_true", help="the same module in a plain PyTorch loop")
    args = ap.parse_args()
    if args.no_lightning:
        plain_main(args)
    elif L is None:
        raise SystemExit("lightning_train.py: Lightning is not installed (pip install lightning), "
                         "or run with --no-lightning")
    else:
        lightning_main(args)


if __name__ == "__main__":
    main()

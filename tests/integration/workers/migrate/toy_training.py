"""The training loop the migration examples share: a small classifier on fixed synthetic data with
DDP over gloo (CPU). The examples differ only in how the processes are started and find each other,
which is what docs/MIGRATING.md shows; the loop is the same, so their results must be identical."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 20, generator=g)
    w = torch.randn(20, 1, generator=g)
    return TensorDataset(x, (x @ w > 0).float())


def train(epochs=3, batch_size=32):
    """Runs in every process once the process group is initialised; rank 0 prints the result."""
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = dataset()
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            x, y = data.tensors
            acc = ((model(x) > 0).float() == y).float().mean().item()
        if dist.get_rank() == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} accuracy {acc:.3f}", flush=True)
    checksum = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: parameter checksum {checksum:.6f}", flush=True)

"""One DQN update of the Nature CNN in PyTorch (SB3's network and loss), for
``bench_cnn_update.py``: run in the peer virtualenv (``pip install torch==2.13.0``).

Prints one JSON line: ``{"ms": median milliseconds per update, "calls": N}``. The update is
SB3's DQN ``train`` step on a batch of 32 uint8 84x84x4 frames: the target network's max over
the next observations, the online Q of the actions taken, the Huber loss, the gradient clipped
to norm 10 and one Adam step; torch uses both cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn


def nature_cnn(actions: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(4, 32, 8, 4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, 2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(3136, 512),
        nn.ReLU(),
        nn.Linear(512, actions),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    q, target = nature_cnn(4), nature_cnn(4)
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-4)
    obs = torch.randint(0, 255, (32, 4, 84, 84), dtype=torch.uint8)
    next_obs = torch.randint(0, 255, (32, 4, 84, 84), dtype=torch.uint8)
    actions, rewards = torch.randint(0, 4, (32, 1)), torch.rand(32)

    def update() -> None:
        with torch.no_grad():
            y = rewards + 0.99 * target(next_obs.float() / 255).max(dim=1)[0]
        taken = q(obs.float() / 255).gather(1, actions).squeeze(1)
        loss = nn.functional.smooth_l1_loss(taken, y)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q.parameters(), 10)
        optimizer.step()

    for _ in range(5):
        update()
    times = []
    for _ in range(args.calls):
        start = time.perf_counter()
        update()
        times.append(time.perf_counter() - start)
    print(json.dumps({"ms": 1e3 * statistics.median(times), "calls": args.calls}))


if __name__ == "__main__":
    main()

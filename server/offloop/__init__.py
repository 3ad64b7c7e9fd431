"""Work off the loop thread: a small pool of threads for the heavy, pure half of a request
(`pool.OffLoopPool`), and the `Stream` that stands for that work on the loop until it is
done (`pool.OffLoopStream`). Thread infrastructure, not API: it knows no OpenAI meaning and
imports no other room, so the API hands it work and the loop polls what it returns."""

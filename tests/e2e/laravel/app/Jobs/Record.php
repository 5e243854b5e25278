<?php

namespace App\Jobs;

use Illuminate\Support\Facades\Redis;

// A queued job (Queue::push('App\Jobs\Record', ['id' => ...])): records its id in a Redis
// set, and each run in a list with the instance that ran it (INSTANCE, from the server's
// env), so a test can tell that every job pushed ran exactly once, and where.
class Record
{
    public function fire($job, array $data): void
    {
        Redis::connection()->sadd('jobs_done', $data['id']);
        Redis::connection()->rpush('jobs_runs', json_encode(['id' => $data['id'], 'instance' => getenv('INSTANCE') ?: null]));
        $job->delete();
    }
}

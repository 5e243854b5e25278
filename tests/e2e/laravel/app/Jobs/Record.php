<?php

namespace App\Jobs;

use Illuminate\Support\Facades\Redis;

// A queued job (Queue::push('App\Jobs\Record', ['id' => ...])): records its id in a Redis
// set, so a test can tell that every job pushed ran exactly once.
class Record
{
    public function fire($job, array $data): void
    {
        Redis::connection()->sadd('jobs_done', $data['id']);
        $job->delete();
    }
}

<?php

namespace PhpWorker;

use Closure;
use Laravel\SerializableClosure\SerializableClosure;
use Throwable;

/**
 * Work fanned out to the booted threads of a task worker, shaped like Laravel Octane's
 * Octane::concurrently(): each callable runs as a task on a thread of its own, and the
 * results come back with the same keys once all are done.
 *
 * A closure travels serialised the way Octane serialises it, with
 * laravel/serializable-closure (install it: Laravel requires it already); without it,
 * pass callables by name ('function', 'Class::method', [Class::class, 'method']). The
 * task worker script runs Tasks::handle() in its loop:
 *
 *     require 'vendor/autoload.php';          // and boot your app once
 *     while (php_worker_handle_task(PhpWorker\Tasks::handle(...))) {}
 */
final class Tasks
{
    /**
     * Runs the callables at once on the task worker $worker and returns their results
     * under the same keys; waits $waitMilliseconds at most. A task that throws, fails
     * or times out makes it throw a TaskException naming the first such task (its
     * message says what the task threw), as Octane's concurrently() does.
     *
     * @param array<array-key, callable> $tasks
     * @return array<array-key, mixed>
     * @throws TaskException
     */
    public static function concurrently(array $tasks, int $waitMilliseconds = 3000, string $worker = 'tasks'): array
    {
        if ($tasks === []) {
            return [];
        }
        $payloads = array_map(self::pack(...), $tasks);
        $answers = php_worker_tasks($worker, $payloads, max(1, $waitMilliseconds) / 1000);
        $results = [];
        foreach ($answers as $key => $answer) {
            if ($answer instanceof Throwable) {
                throw $answer;
            }
            $reply = unserialize($answer);
            if (!is_array($reply) || !array_key_exists('ok', $reply)) {
                throw new TaskException("task $key on worker $worker failed: its answer is not one of PhpWorker\\Tasks::handle()");
            }
            if (!$reply['ok']) {
                throw new TaskException("task $key on worker $worker failed: {$reply['class']}: {$reply['message']}");
            }
            $results[$key] = $reply['result'];
        }
        return $results;
    }

    /**
     * The task worker's handler: runs one task Tasks::concurrently() sent and answers
     * its result, or what it threw (so the task worker's script goes on either way).
     */
    public static function handle(string $payload): string
    {
        try {
            $task = unserialize($payload);
            if ($task instanceof SerializableClosure) {
                $task = $task->getClosure();
            }
            if (!is_callable($task)) {
                throw new \InvalidArgumentException('the task is not a callable');
            }
            return serialize(['ok' => true, 'result' => $task()]);
        } catch (Throwable $e) {
            return serialize(['ok' => false, 'class' => get_class($e), 'message' => $e->getMessage()]);
        }
    }

    private static function pack(callable $task): string
    {
        if ($task instanceof Closure) {
            if (!class_exists(SerializableClosure::class)) {
                throw new \InvalidArgumentException(
                    'a closure can run as a task only with laravel/serializable-closure installed; pass a callable by name');
            }
            return serialize(new SerializableClosure($task));
        }
        if (is_object($task)) {
            throw new \InvalidArgumentException('an invokable object cannot run as a task; pass a closure or a callable by name');
        }
        return serialize($task);
    }
}

<?php

namespace PhpWorker;

use Throwable;

/**
 * Callbacks run every so many seconds, in a background worker's script, shaped like
 * Laravel Octane's Octane::tick(): the script registers its ticks, then run() calls
 * them on time until the server tells the script to stop (a reload, a restart, the
 * server stopping), and returns then.
 *
 *     (new PhpWorker\Ticker())
 *         ->tick('metrics', fn () => push_metrics(), seconds: 10)
 *         ->tick('cleanup', fn () => prune(), seconds: 60, immediate: true)
 *         ->run();
 *
 * A tick that throws is reported (error_log, so the server's log names the worker)
 * and runs again at its next time. Ticks run one after the other: a slow one delays
 * the next ones.
 */
final class Ticker
{
    /** @var array<string, array{callable, float, float}> name => [callback, seconds, next time] */
    private array $ticks = [];

    public function tick(string $name, callable $callback, int|float $seconds = 1, bool $immediate = false): self
    {
        if ($seconds <= 0) {
            throw new \InvalidArgumentException("tick $name: seconds must be greater than 0");
        }
        $this->ticks[$name] = [$callback, (float) $seconds, microtime(true) + ($immediate ? 0 : $seconds)];
        return $this;
    }

    /** Runs the ticks until the script must stop. */
    public function run(): void
    {
        if ($this->ticks === []) {
            throw new \LogicException('no tick registered');
        }
        while (true) {
            $next = min(array_column($this->ticks, 2));
            if (php_worker_wait_stop(max(0, $next - microtime(true)))) {
                return;
            }
            $now = microtime(true);
            foreach ($this->ticks as $name => [$callback, $seconds, $at]) {
                if ($at > $now) {
                    continue;
                }
                // The next time keeps its rhythm: a late tick does not shift the others.
                $this->ticks[$name][2] = $at + $seconds * max(1, ceil(($now - $at) / $seconds));
                try {
                    $callback();
                } catch (Throwable $e) {
                    error_log("tick $name failed: " . get_class($e) . ': ' . $e->getMessage());
                }
                if (php_worker_stopping()) {
                    return;
                }
            }
        }
    }
}

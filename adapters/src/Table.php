<?php

namespace PhpWorker;

use Countable;
use RuntimeException;
use ValueError;

/**
 * A table of rows shared by every PHP thread of the process, shaped like Laravel Octane's
 * tables and Swoole\Table, over php_worker's shared table (php_worker_shared_*). Rows
 * need no schema: a column holding an int is a counter that incr()/decr() change
 * atomically; other values (strings, floats, bools, arrays) are stored as they are.
 *
 *     $hits = new PhpWorker\Table('hits');
 *     $hits->set($ip, ['first_seen' => time(), 'agent' => $agent]);
 *     $hits->incr($ip, 'requests');           // atomic, creates the row or column
 *     $hits->get($ip);                        // ['first_seen' => ..., 'agent' => ..., 'requests' => 1]
 *
 * Layout in the shared table, where {name}, {key} and {col} have "%" and ":" escaped
 * as %25 and %3A (other keys look exactly like this):
 *
 *     table:{name}                the number of rows (an int)
 *     table:{name}:{key}          the row: its non-int columns, the names of its int ones
 *     table:{name}:{key}:{col}    an int column
 *     table:{name}:{key}:         the row exists (added when it is created)
 *     table:{name}:{key}::        the row's lock, while a thread writes the row
 *
 * Each key is at most 250 bytes (a ValueError otherwise), so keep names and keys short.
 *
 * Atomicity:
 * - incr()/decr() of an int column of an existing row is one
 *   php_worker_shared_increment() and takes no lock: concurrent increments are never
 *   lost.
 * - Everything else that writes a row (set(), del(), incr() that creates the row or the
 *   column, incr() of a float column) holds the row's lock, a key added with
 *   php_worker_shared_add() for at most 2 s, so writes of one row never lose each
 *   other's columns and count() (changed only under the lock, when a row is created or
 *   deleted) is exact.
 * - Reads take no lock: a get() during a set() of several columns can see some of them
 *   written and not yet the others.
 * - A thread that dies holding a lock (a fatal error in the middle of a write) blocks
 *   that row's writers for 2 s at most; a writer that waits 5 s throws a
 *   RuntimeException.
 *
 * The table lives as long as the process (one Caddy): worker restarts and reloads keep
 * it, a restart of Caddy empties it, and php_worker_shared_flush() (or a Laravel
 * Cache::flush() on the php_worker store) empties every table.
 */
final class Table implements Countable
{
    /** "table:{name}", the prefix of every key of this table and its row count. */
    private string $base;

    public function __construct(string $name)
    {
        Runtime::require(self::class);
        if ($name === '') {
            throw new ValueError(self::class . ': the table name must not be empty');
        }
        $this->base = 'table:' . self::escape($name);
    }

    /**
     * Writes a row. On an existing row, the columns given replace those it has and the
     * others stay, as with Swoole\Table::set(); a new row has only the columns given.
     * False when the shared table is full.
     */
    public function set(string $key, array $row): bool
    {
        $values = [];
        $ints = [];
        foreach ($row as $column => $value) {
            $column = self::column($column);
            $values[$column] = is_int($value) ? null : $value;
            if (is_int($value)) {
                $ints[$column] = $value;
            }
        }
        return $this->locked($key, function () use ($key, $values, $ints): bool {
            // The counters first, so that a reader who finds the row finds them too.
            foreach ($ints as $column => $value) {
                if (!php_worker_shared_put($this->columnKey($key, (string) $column), $value)) {
                    return false;
                }
            }
            return $this->write($key, $values, array_fill_keys(array_keys($ints), true));
        });
    }

    /**
     * The row (column => value), or one column's value; false when the row (or the
     * column) does not exist.
     */
    public function get(string $key, ?string $field = null): mixed
    {
        $row = $this->row($key);
        if ($row === null) {
            return false;
        }
        if ($field !== null) {
            if (isset($row['ints'][$field])) {
                return php_worker_shared_get($this->columnKey($key, $field), 0);
            }
            return array_key_exists($field, $row['values']) ? $row['values'][$field] : false;
        }
        $out = [];
        foreach ($row['values'] as $column => $value) {
            $out[$column] = isset($row['ints'][$column])
                ? php_worker_shared_get($this->columnKey($key, (string) $column), 0)
                : $value;
        }
        return $out;
    }

    /**
     * Adds $by to a column and returns its new value: atomically for an int column (a
     * float $by is truncated there, as Swoole does), under the row's lock for a float
     * column. A missing row or column is created, starting at 0. False for a column
     * holding something else than a number, or when the shared table is full.
     */
    public function incr(string $key, string $column, int|float $by = 1): int|float|false
    {
        self::column($column);
        $row = php_worker_shared_get($this->rowKey($key));
        if (is_array($row) && isset($row['ints'][$column])) {
            // The common case takes no lock: one atomic increment.
            $value = php_worker_shared_increment($this->columnKey($key, $column), (int) $by);
            if ($value !== false && !$this->exists($key)) {
                $this->relist($key, $column); // a del() ran meanwhile
            }
            return $value;
        }
        return $this->locked($key, function () use ($key, $column, $by): int|float|false {
            $row = $this->row($key);
            if ($row !== null && isset($row['ints'][$column])) {
                return php_worker_shared_increment($this->columnKey($key, $column), (int) $by);
            }
            if ($row !== null && array_key_exists($column, $row['values'])) {
                $current = $row['values'][$column];
                if (!is_float($current)) {
                    return false;
                }
                $value = $current + $by;
                return $this->write($key, [$column => $value], []) ? $value : false;
            }
            if (is_float($by)) {
                return $this->write($key, [$column => $by], []) ? $by : false;
            }
            $value = php_worker_shared_increment($this->columnKey($key, $column), $by);
            if ($value === false || !$this->write($key, [$column => null], [$column => true])) {
                return false;
            }
            return $value;
        });
    }

    public function decr(string $key, string $column, int|float $by = 1): int|float|false
    {
        return $this->incr($key, $column, -$by);
    }

    /** Removes a row; false when it did not exist (or another del() removed it first). */
    public function del(string $key): bool
    {
        return $this->locked($key, function () use ($key): bool {
            if (!php_worker_shared_forget($this->markerKey($key))) {
                return false;
            }
            php_worker_shared_increment($this->base, -1);
            $row = php_worker_shared_get($this->rowKey($key));
            php_worker_shared_forget($this->rowKey($key));
            foreach (array_keys(is_array($row) ? $row['ints'] : []) as $column) {
                php_worker_shared_forget($this->columnKey($key, (string) $column));
            }
            return true;
        });
    }

    public function exists(string $key): bool
    {
        return php_worker_shared_get($this->markerKey($key)) !== null;
    }

    /** The number of rows of this table. */
    public function count(): int
    {
        return (int) php_worker_shared_get($this->base, 0);
    }

    /**
     * Creates the row with these columns, or merges them into the existing row
     * ($values: column => value, null for int columns; $ints: the int columns). Runs
     * under the row's lock.
     */
    private function write(string $key, array $values, array $ints): bool
    {
        $rowKey = $this->rowKey($key);
        $row = $this->row($key);
        if ($row === null) {
            // The data first, then the marker that makes the row exist.
            if (!php_worker_shared_put($rowKey, ['values' => $values, 'ints' => $ints])
                || !php_worker_shared_add($this->markerKey($key), true)) {
                return false;
            }
            php_worker_shared_increment($this->base);
            return true;
        }
        $dropped = [];
        foreach ($values as $column => $value) {
            if (isset($row['ints'][$column]) && !isset($ints[$column])) {
                $dropped[] = (string) $column; // was an int, now holds something else
                unset($row['ints'][$column]);
            }
            $row['values'][$column] = $value;
        }
        $row['ints'] += $ints;
        if (!php_worker_shared_put($rowKey, $row)) {
            return false;
        }
        foreach ($dropped as $column) {
            php_worker_shared_forget($this->columnKey($key, $column));
        }
        return true;
    }

    /**
     * After a lock-free increment that found the row gone: if the increment came after
     * the del() (its counter exists again), the row exists again with that column, as
     * an incr() of a missing row does.
     */
    private function relist(string $key, string $column): void
    {
        $this->locked($key, function () use ($key, $column): void {
            $row = $this->row($key);
            if (($row === null || !isset($row['ints'][$column]))
                && php_worker_shared_get($this->columnKey($key, $column)) !== null) {
                $this->write($key, [$column => null], [$column => true]);
            }
        });
    }

    /**
     * Runs $f holding the row's lock: a key added with a 2-second expiry (so a thread
     * that dies holding it, on a fatal error, blocks the row for 2 s at most), waited for
     * by polling. A full table has no room for the lock: $f runs without it.
     */
    private function locked(string $key, callable $f): mixed
    {
        $lock = $this->rowKey($key) . '::';
        $token = random_int(1, PHP_INT_MAX);
        $deadline = microtime(true) + 5;
        $refused = 0;
        for ($pause = 10; !php_worker_shared_add($lock, $token, 2); $pause = min($pause * 2, 1000)) {
            if (php_worker_shared_get($lock) === null) {
                // Nobody holds it: released meanwhile, or the table is full and refuses
                // the lock itself. Then writes fail on their own and del() frees room.
                if (++$refused === 3) {
                    return $f();
                }
                continue;
            }
            $refused = 0;
            if (microtime(true) > $deadline) {
                throw new RuntimeException(self::class . ": row \"$key\" stayed locked for 5 s");
            }
            usleep($pause);
        }
        try {
            return $f();
        } finally {
            if (php_worker_shared_get($lock) === $token) {
                php_worker_shared_forget($lock);
            }
        }
    }

    /** The row's data, or null when the row does not exist. */
    private function row(string $key): ?array
    {
        if (!$this->exists($key)) {
            return null;
        }
        $row = php_worker_shared_get($this->rowKey($key));
        return is_array($row) ? $row : null;
    }

    private function rowKey(string $key): string
    {
        return $this->base . ':' . self::escape($key);
    }

    private function markerKey(string $key): string
    {
        return $this->rowKey($key) . ':';
    }

    private function columnKey(string $key, string $column): string
    {
        return $this->rowKey($key) . ':' . self::escape($column);
    }

    private static function column(int|string $column): string
    {
        if ($column === '') {
            throw new ValueError(self::class . ': a column name must not be empty');
        }
        return (string) $column;
    }

    private static function escape(string $part): string
    {
        return strtr($part, ['%' => '%25', ':' => '%3A']);
    }
}

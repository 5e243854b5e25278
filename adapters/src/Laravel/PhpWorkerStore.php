<?php

namespace PhpWorker\Laravel;

use Illuminate\Contracts\Cache\Store;
use PhpWorker\Runtime;

/**
 * A Laravel cache store over php_worker's shared table (php_worker_shared_*): one table
 * per Caddy process, seen by all its PHP threads, with no network hop and no
 * serialization of scalars and arrays (objects go through serialize()).
 *
 * - Keys are the prefix, a colon and the cache key (as RedisStore does: "app:users.1";
 *   no prefix, no colon); a key longer than the table's 250 bytes is stored as the
 *   prefix and "sha256:" followed by the SHA-256 of the whole key.
 * - put() with seconds <= 0 forgets the key, as Cache::put() does (Laravel's Repository
 *   never passes such a TTL to a store).
 * - add() is atomic (php_worker_shared_add). Cache::add() without a TTL does not call
 *   it: Laravel's Repository checks and puts in two steps then, for every store.
 * - increment()/decrement() are atomic, start a missing key at 0 (the new entry never
 *   expires; an existing one keeps its TTL) and return false for a value that is not an
 *   integer (php_worker does not increment numeric strings or floats).
 * - flush() empties the whole table of the process, every prefix (every app served by
 *   the same Caddy) and every PhpWorker\Table included: the table cannot list keys, so a
 *   flush limited to the prefix is not possible.
 * - touch() sets a live item's new time to live atomically; seconds <= 0 make it never
 *   expire.
 * - put()/putMany()/forever() return false when the table is full (shared_store_size).
 * - Outside php_worker (artisan under the PHP CLI, queue workers, tests) the store is
 *   made as usual, since Laravel makes the default store to build commands such as
 *   queue:restart; its first use throws a RuntimeException that says why.
 */
class PhpWorkerStore implements Store
{
    private const MAX_KEY = 250;

    protected string $prefix;

    private bool $checked = false;

    public function __construct(string $prefix = '')
    {
        $this->setPrefix($prefix);
    }

    public function setPrefix(string $prefix): void
    {
        $this->prefix = $prefix === '' ? '' : $prefix . ':';
    }

    /** @param string $key */
    public function get($key)
    {
        $this->requireRuntime();
        return php_worker_shared_get($this->key($key));
    }

    public function many(array $keys)
    {
        $values = [];
        foreach ($keys as $key) {
            $values[$key] = $this->get($key);
        }
        return $values;
    }

    /**
     * @param string $key
     * @param int $seconds
     */
    public function put($key, $value, $seconds)
    {
        $this->requireRuntime();
        $seconds = (int) $seconds;
        if ($seconds <= 0) {
            $this->forget($key);
            return true;
        }
        return php_worker_shared_put($this->key($key), $value, $seconds);
    }

    public function putMany(array $values, $seconds)
    {
        $stored = true;
        foreach ($values as $key => $value) {
            $stored = $this->put($key, $value, $seconds) && $stored;
        }
        return $stored;
    }

    /**
     * Stores the value only if the key is absent (or expired), atomically.
     *
     * @param string $key
     * @param int $seconds
     */
    public function add($key, $value, $seconds)
    {
        $this->requireRuntime();
        $seconds = (int) $seconds;
        if ($seconds <= 0) {
            return false; // as Cache::add() answers: an item that expires at once is never added
        }
        return php_worker_shared_add($this->key($key), $value, $seconds);
    }

    /** @return int|false the new value */
    public function increment($key, $value = 1)
    {
        $this->requireRuntime();
        return php_worker_shared_increment($this->key($key), (int) $value);
    }

    /** @return int|false the new value */
    public function decrement($key, $value = 1)
    {
        return $this->increment($key, -(int) $value);
    }

    public function forever($key, $value)
    {
        $this->requireRuntime();
        return php_worker_shared_put($this->key($key), $value, 0);
    }

    /**
     * Gives a live item a new time to live, atomically (Laravel 11's Cache::touch()).
     *
     * @param string $key
     * @param int $seconds 0 or less: the item never expires
     * @return bool whether the item existed
     */
    public function touch($key, $seconds)
    {
        $this->requireRuntime();
        return php_worker_shared_touch($this->key($key), max(0, (int) $seconds));
    }

    /** @return bool whether the key existed */
    public function forget($key)
    {
        $this->requireRuntime();
        return php_worker_shared_forget($this->key($key));
    }

    /** Empties the process's whole shared table, not only this prefix's keys. */
    public function flush()
    {
        $this->requireRuntime();
        return php_worker_shared_flush();
    }

    public function getPrefix()
    {
        return $this->prefix;
    }

    /** The functions are called by name: PHP looks them up before the arguments run. */
    private function requireRuntime(): void
    {
        if (!$this->checked) {
            Runtime::require('The php_worker cache store');
            $this->checked = true;
        }
    }

    protected function key($key): string
    {
        $key = $this->prefix . $key;
        if (strlen($key) > self::MAX_KEY) {
            $key = $this->prefix . 'sha256:' . hash('sha256', $key);
            if (strlen($key) > self::MAX_KEY) {
                $key = 'sha256:' . hash('sha256', $key);
            }
        }
        return $key;
    }
}

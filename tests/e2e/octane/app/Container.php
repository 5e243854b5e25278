<?php
// A tiny service container in the shape of Laravel's: singletons resolved once and
// shared, scoped instances that belong to one request.
final class Container
{
    private array $bindings = [];
    private array $instances = [];
    private array $scoped = [];
    public static int $boots = 0;
    public string $bootId;

    public function __construct()
    {
        self::$boots++;
        $this->bootId = bin2hex(random_bytes(6));
    }

    public function singleton(string $id, callable $factory): void
    {
        $this->bindings[$id] = $factory;
    }

    public function scoped(string $id, callable $factory): void
    {
        $this->bindings[$id] = $factory;
        $this->scoped[$id] = true;
    }

    public function make(string $id): mixed
    {
        if (!array_key_exists($id, $this->instances)) {
            $this->instances[$id] = ($this->bindings[$id])($this);
        }
        return $this->instances[$id];
    }

    public function instance(string $id, mixed $value): void
    {
        $this->instances[$id] = $value;
    }

    public function has(string $id): bool
    {
        return array_key_exists($id, $this->instances);
    }

    /** What Octane does after each request: forget the request's scoped instances. */
    public function flushScoped(): void
    {
        foreach (array_keys($this->scoped) as $id) {
            unset($this->instances[$id]);
        }
        unset($this->instances['request']);
    }
}

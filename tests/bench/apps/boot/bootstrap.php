<?php
// A framework-shaped bootstrap whose cost is a deliberate 200 ms (the setup of the
// Octane/FrankenPHP talk): configuration, container, routes.
final class App
{
    public array $config;
    public array $routes;
    public int $served = 0;

    public function __construct()
    {
        usleep(200_000);
        $this->config = ['name' => 'boot-cost', 'debug' => false];
        $this->routes = ['/' => fn (array $q) => ['hello' => $q['name'] ?? 'world']];
    }

    public function handle(string $uri): string
    {
        $this->served++;
        $path = parse_url($uri, PHP_URL_PATH) ?: '/';
        parse_str((string) parse_url($uri, PHP_URL_QUERY), $query);
        $route = $this->routes[$path] ?? $this->routes['/'];
        return json_encode($route($query) + ['app' => $this->config['name']]);
    }
}
return new App();

<?php
// frankenphp_log() with a context; ?mode= makes the context's JsonSerializable throw,
// exit() or run out of memory while frankenphp_log() encodes it.
$mode = $_GET['mode'] ?? 'ok';
$tag = $_GET['tag'] ?? '';
$context = ['tag' => $tag, 'n' => 3, 'list' => [1, 2], 'obj' => new class($mode) implements JsonSerializable {
    public function __construct(private string $mode) {}
    public function jsonSerialize(): mixed
    {
        if ($this->mode === 'throw') {
            throw new RuntimeException('cannot encode');
        }
        if ($this->mode === 'exit') {
            echo 'exited while encoding';
            exit(4);
        }
        if ($this->mode === 'memory') {
            $grow = [];
            while (true) {
                $grow[] = str_repeat('x', 1 << 20);
            }
        }
        return ['ok' => true];
    }
}];
try {
    frankenphp_log("franken $tag", FRANKENPHP_LOG_LEVEL_ERROR, $context);
    frankenphp_log("franken list $tag", FRANKENPHP_LOG_LEVEL_WARN, ['a', ['b']]);
    echo 'logged';
} catch (RuntimeException $e) {
    echo 'caught: ', $e->getMessage();
}

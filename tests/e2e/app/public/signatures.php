<?php
// The signatures of the php_worker module's functions, as reflection sees them.
$out = [];
foreach ((new ReflectionExtension('php_worker'))->getFunctions() as $name => $f) {
    $params = [];
    foreach ($f->getParameters() as $p) {
        $params[] = trim($p->getType() . ' $' . $p->getName()
            . ($p->isOptional() ? ' = ' . ($p->isDefaultValueConstant() ? $p->getDefaultValueConstantName()
                : json_encode($p->getDefaultValue())) : ''));
    }
    $out[$name] = $name . '(' . implode(', ', $params) . '): ' . $f->getReturnType();
}
ksort($out);
header('Content-Type: application/json');
echo json_encode(array_values($out));

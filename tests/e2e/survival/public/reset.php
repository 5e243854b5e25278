<?php
// What a deploy step does (cachetool, Deployer, Laravel packages).
echo opcache_reset() ? 'reset' : 'not reset';

<?php
throw new RuntimeException('uncaught on purpose');

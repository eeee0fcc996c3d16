// An Express app as its guide writes it: app.listen(port), no host.
const express = require('express');
const app = express();
app.get('/', (req, res) => res.send(`express instance ${process.env.HAYATE_INSTANCE} port ${process.env.PORT}`));
app.listen(process.env.PORT || 3000, () => console.log('express listening'));
